// A TCP relay between a client and a server that a test can cut off and heal, as a network
// partition would, while every process stays up and every connection stays open.
import { createServer, type Server, Socket } from "node:net";
import { freePort } from "./server.js";

export class Relay {
  /**
   * While set, nothing passes. `drop`: bytes either way are thrown away (what the peers sent
   * meanwhile never arrives). `hold`: they wait in the sockets' buffers and arrive after the
   * heal, as TCP's retransmissions would deliver them. `reset`: connections are reset, new
   * ones as soon as they are made (a peer that is unreachable and says so).
   */
  private mode: "open" | "drop" | "hold" | "reset" = "open";
  private readonly sockets = new Set<Socket>();
  private server!: Server;
  port = 0;

  async start(to: number): Promise<void> {
    this.port = await freePort();
    this.server = createServer((client) => {
      if (this.mode === "reset") {
        client.resetAndDestroy();
        return;
      }
      const upstream = new Socket();
      upstream.connect(to, "127.0.0.1");
      for (const s of [client, upstream]) {
        this.sockets.add(s);
        s.on("error", () => {});
        s.on("close", () => this.sockets.delete(s));
        if (this.mode === "hold") s.pause();
      }
      client.on("data", (d: Buffer) => this.mode === "open" && upstream.write(d));
      upstream.on("data", (d: Buffer) => this.mode === "open" && client.write(d));
      client.on("close", () => upstream.destroy());
      upstream.on("close", () => client.destroy());
    });
    await new Promise<void>((r) => this.server.listen(this.port, "127.0.0.1", r));
  }

  cut(mode: "drop" | "hold" | "reset" = "drop"): void {
    this.mode = mode;
    if (mode === "hold") for (const s of this.sockets) s.pause();
    if (mode === "reset") for (const s of this.sockets) s.resetAndDestroy();
  }

  heal(): void {
    this.mode = "open";
    for (const s of this.sockets) s.resume();
  }

  close(): void {
    for (const s of this.sockets) s.destroy();
    this.server.close();
  }
}

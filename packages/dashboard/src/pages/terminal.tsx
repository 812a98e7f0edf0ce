import type { processPb } from "@aenv/protocol";
import { FitAddon } from "@xterm/addon-fit";
import { Terminal } from "@xterm/xterm";
import "@xterm/xterm/css/xterm.css";
import { useEffect, useRef, useState } from "preact/hooks";
import { type Envd, type EnvdTarget, envdClient } from "../envd.js";

type Status = "connecting" | "connected" | "disconnected" | "exited";
type ProcessEvent = processPb.ProcessEvent;

const SHELLS: Array<[string, string[]]> = [
  ["/bin/bash", ["-l"]],
  ["/bin/sh", ["-l"]],
];

/**
 * An interactive shell in the sandbox: xterm.js over a PTY process that envd starts (the
 * same Connect RPCs the SDK's `pty` uses: Start, SendInput, Update for the size, Connect to
 * re-attach). A pause cuts the stream; when the sandbox runs again the terminal re-attaches
 * to the same shell (it survives the pause) or, if it is gone, starts a new one.
 */
export function TerminalTab({ target, running }: { target: EnvdTarget; running: boolean }) {
  const box = useRef<HTMLDivElement>(null);
  const [status, setStatus] = useState<Status>("connecting");
  const session = useRef<ShellSession>();
  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const s = new ShellSession(envdClient(target), el, setStatus);
    session.current = s;
    return () => s.close();
  }, [target.sandboxId, target.accessToken]);
  useEffect(() => {
    if (running) session.current?.attach();
    else session.current?.detach("the sandbox is paused; the terminal re-attaches when it resumes");
  }, [running]);
  return (
    <div class="terminal-tab">
      <p class="muted" role="status" aria-live="polite">
        Terminal: <span data-status={status}>{status}</span>
        {status === "disconnected" && running && (
          <button type="button" class="quiet" onClick={() => session.current?.attach()}>
            Reconnect
          </button>
        )}
      </p>
      <div class="term-box" ref={box} />
    </div>
  );
}

class ShellSession {
  private readonly term: Terminal;
  private readonly fit = new FitAddon();
  private readonly ro: ResizeObserver;
  private pid: number | undefined;
  private stream: AbortController | undefined;
  /** Keystrokes are sent one call after another, in order. */
  private input: Promise<unknown> = Promise.resolve();
  private closed = false;

  constructor(
    private readonly envd: Envd,
    el: HTMLElement,
    private readonly onStatus: (s: Status) => void,
  ) {
    this.term = new Terminal({ cursorBlink: true, fontSize: 13, convertEol: false, scrollback: 5000 });
    this.term.loadAddon(this.fit);
    this.term.open(el);
    this.fit.fit();
    this.term.onData((d) => this.send(d));
    this.term.onResize(({ cols, rows }) => this.resize(cols, rows));
    this.ro = new ResizeObserver(() => {
      try {
        this.fit.fit();
      } catch {
        // Not laid out (a hidden tab): fitted when shown.
      }
    });
    this.ro.observe(el);
  }

  /** Attaches to the shell (or starts one) unless a stream is already open. */
  attach(): void {
    if (this.closed || this.stream) return;
    const ctl = new AbortController();
    this.stream = ctl;
    this.onStatus("connecting");
    void this.run(ctl).finally(() => {
      if (this.stream === ctl) this.stream = undefined;
    });
  }

  detach(why: string): void {
    if (!this.stream) return;
    this.stream.abort();
    this.stream = undefined;
    this.term.write(`\r\n\x1b[33m[${why}]\x1b[0m\r\n`);
    this.onStatus("disconnected");
  }

  close(): void {
    this.closed = true;
    this.stream?.abort();
    this.ro.disconnect();
    this.term.dispose();
  }

  private async run(ctl: AbortController): Promise<void> {
    const opts = { signal: ctl.signal };
    try {
      let events: AsyncIterable<{ event?: ProcessEvent }> | undefined;
      if (this.pid !== undefined) {
        events = this.envd.process.connect({ process: { selector: { case: "pid", value: this.pid } } }, opts);
        if (!(await this.pump(events, ctl, true))) return;
        // The old shell is gone (the sandbox restarted it): a new one below.
        this.pid = undefined;
      }
      for (const [cmd, args] of SHELLS) {
        events = this.envd.process.start(
          {
            process: { cmd, args, envs: { TERM: "xterm-256color", LANG: "C.UTF-8" } },
            pty: { size: { cols: this.term.cols, rows: this.term.rows } },
          },
          opts,
        );
        if (!(await this.pump(events, ctl, false))) return;
      }
      this.term.write("\r\n\x1b[31m[no shell could be started]\x1b[0m\r\n");
      this.onStatus("exited");
    } catch (err) {
      if (ctl.signal.aborted || this.closed) return;
      this.term.write(`\r\n\x1b[33m[disconnected: ${(err as Error).message}]\x1b[0m\r\n`);
      this.onStatus("disconnected");
    }
  }

  /**
   * Copies one stream's output to the terminal. Answers true when the stream failed before
   * any event (try the next way), false once it ran (ended or was cut: handled here).
   */
  private async pump(events: AsyncIterable<{ event?: ProcessEvent }>, ctl: AbortController, reattach: boolean) {
    let started = false;
    try {
      for await (const { event } of events) {
        const e = event?.event;
        if (!e) continue;
        if (!started) {
          started = true;
          this.onStatus("connected");
          if (reattach) this.term.write("\r\n\x1b[32m[reconnected]\x1b[0m\r\n");
        }
        if (e.case === "start") {
          this.pid = e.value.pid;
          this.resize(this.term.cols, this.term.rows);
        } else if (e.case === "data" && e.value.output.case === "pty") {
          this.term.write(e.value.output.value);
        } else if (e.case === "end") {
          this.pid = undefined;
          this.term.write(`\r\n\x1b[33m[shell exited: ${e.value.status || e.value.exitCode}]\x1b[0m\r\n`);
          this.onStatus("exited");
        }
      }
    } catch (err) {
      if (!started && !ctl.signal.aborted) return true;
      throw err;
    }
    if (!started) return true;
    // Ended without an end event: the connection was cut (a pause, a restart).
    if (this.pid !== undefined && !ctl.signal.aborted) {
      this.term.write("\r\n\x1b[33m[disconnected]\x1b[0m\r\n");
      this.onStatus("disconnected");
    }
    return false;
  }

  private send(data: string): void {
    const pid = this.pid;
    if (pid === undefined) return;
    const bytes = new TextEncoder().encode(data);
    this.input = this.input.then(() =>
      this.envd.process
        .sendInput({
          process: { selector: { case: "pid", value: pid } },
          input: { input: { case: "pty", value: bytes } },
        })
        .catch(() => undefined),
    );
  }

  private resize(cols: number, rows: number): void {
    const pid = this.pid;
    if (pid === undefined) return;
    void this.envd.process
      .update({ process: { selector: { case: "pid", value: pid } }, pty: { size: { cols, rows } } })
      .catch(() => undefined);
  }
}

/**
 * envd's listener: every connection is read through a 1 MiB buffer (one for all of them) and
 * handed to the HTTP server as if accepted by it.
 *
 * Node's HTTP server reads a socket 64 KiB at a time into a fresh buffer per read. Inside
 * gVisor each read is a costly trip through the sentry: a 32 MiB upload took 512 reads and
 * 174-250 ms of sandbox CPU (181-257 MB/s) in a plain node server, 39 reads and 105-138 ms
 * (329-367 MB/s) read like this. The `onread` option of net.Socket gives the large reads; a
 * socket accepted by a server cannot take it, so the accepted handle is moved into a new
 * Socket that has it. The HTTP server then parses what the callback emits (its JavaScript
 * path, the one TLS sockets take) instead of reading the handle itself.
 *
 * Where this Node lacks what it needs (the handle's user-buffer call), a connection goes to
 * the HTTP server unchanged.
 */
import type http from "node:http";
import net, { type Socket } from "node:net";
import { registerScratchBuffer } from "../heap-trim.js";

const READ_BUFFER_BYTES = 1 << 20;

/**
 * One buffer for every connection: libuv reads into it and calls back before its next read
 * on any socket (all on this thread), and the callback copies what it read. Its pages are
 * touched only as far as the largest read so far, and dropped again at every heap trim
 * (after large transfers, before a checkpoint).
 */
let readBuffer: Buffer | undefined;

interface StreamHandle {
  useUserBuffer?: unknown;
  /** Set by the HTTP server on a handle its parser reads natively; preset to keep it off. */
  _consumed?: boolean;
}

/** The accepted handle in a Socket that reads through a large buffer, or undefined. */
function withLargeReads(accepted: Socket): Socket | undefined {
  const holder = accepted as Socket & { _handle?: StreamHandle | null };
  const handle = holder._handle;
  if (!handle || typeof handle.useUserBuffer !== "function") return undefined;
  // The first wrapper lets go of the handle: destroying it only updates the listener's count.
  holder._handle = null;
  accepted.destroy();
  const socket: Socket = new net.Socket({
    handle,
    onread: {
      buffer: () => {
        if (!readBuffer) {
          readBuffer = Buffer.allocUnsafe(READ_BUFFER_BYTES);
          registerScratchBuffer(readBuffer);
        }
        return readBuffer;
      },
      // The buffer is reused by the next read (of any socket): what the parser keeps is a copy.
      callback: (n: number, buf: Uint8Array) => {
        socket.emit("data", Buffer.from(buf.subarray(0, n)));
      },
    },
  } as net.SocketConstructorOpts);
  handle._consumed = true;
  return socket;
}

/** A TCP server that feeds `server` connections read in large chunks; listen on it. */
export function largeReadListener(server: http.Server): net.Server {
  return net.createServer({ pauseOnConnect: true }, (accepted) => {
    const socket = withLargeReads(accepted);
    if (socket) {
      server.emit("connection", socket);
    } else {
      server.emit("connection", accepted);
      accepted.resume();
    }
  });
}

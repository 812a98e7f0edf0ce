import { STATUS_CODES } from "node:http";
import type { Duplex } from "node:stream";
import { errorBodyOf } from "./http-errors.js";
import { countSocketError } from "./metrics.js";

/**
 * An E2B error answer ({code, message}) written on a raw socket and the socket ended: for
 * upgrade requests and malformed HTTP, which have no ServerResponse.
 */
export function endWithError(socket: Duplex, status: number, message: string): void {
  if (socket.destroyed) return;
  countSocketError(status);
  const body = JSON.stringify(errorBodyOf(status, message));
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? "Error"}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
  );
}

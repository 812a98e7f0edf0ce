/**
 * Reads the server name (SNI) out of the first bytes of a TLS connection: a ClientHello,
 * possibly split over several TLS records. Returns undefined while more bytes are needed,
 * null when the bytes are not a ClientHello or it names no server.
 */
export function parseClientHelloSni(buf: Buffer): string | null | undefined {
  // Reassemble the handshake body from consecutive handshake records.
  const parts: Buffer[] = [];
  let off = 0;
  while (off + 5 <= buf.length) {
    if (buf[off] !== 22) return null; // not a handshake record
    const len = buf.readUInt16BE(off + 3);
    if (off + 5 + len > buf.length) break;
    parts.push(buf.subarray(off + 5, off + 5 + len));
    off += 5 + len;
    const hs = Buffer.concat(parts);
    if (hs.length >= 4) {
      if (hs[0] !== 1) return null; // not a ClientHello
      const bodyLen = hs.readUIntBE(1, 3);
      if (hs.length >= 4 + bodyLen) return sniFromHello(hs.subarray(4, 4 + bodyLen));
    }
  }
  if (buf.length >= 1 && buf[0] !== 22) return null;
  return undefined;
}

function sniFromHello(b: Buffer): string | null {
  try {
    let p = 2 + 32; // client_version, random
    p += 1 + (b[p] as number); // session_id
    p += 2 + b.readUInt16BE(p); // cipher_suites
    p += 1 + (b[p] as number); // compression_methods
    if (p + 2 > b.length) return null;
    const end = p + 2 + b.readUInt16BE(p);
    p += 2;
    while (p + 4 <= end) {
      const type = b.readUInt16BE(p);
      const len = b.readUInt16BE(p + 2);
      p += 4;
      if (type === 0) {
        // server_name: list length, then (type, length, name) entries; host_name is type 0.
        let q = p + 2;
        const listEnd = p + 2 + b.readUInt16BE(p);
        while (q + 3 <= listEnd) {
          const nameType = b[q] as number;
          const nameLen = b.readUInt16BE(q + 1);
          if (nameType === 0) {
            const name = b.subarray(q + 3, q + 3 + nameLen).toString("ascii");
            return /^[A-Za-z0-9._-]{1,253}$/.test(name) ? name : null;
          }
          q += 3 + nameLen;
        }
        return null;
      }
      p += len;
    }
    return null;
  } catch {
    return null;
  }
}

/**
 * Reads the Host header of the first HTTP request. Undefined while the header block is
 * incomplete, null when it is complete (or too long) without a usable Host.
 */
export function parseHttpHost(buf: Buffer, max = 16_384): string | null | undefined {
  const end = buf.indexOf("\r\n\r\n");
  if (end < 0) return buf.length > max ? null : undefined;
  const head = buf.subarray(0, end).toString("latin1");
  const m = /\r\nhost:[ \t]*([^\r\n]*)/i.exec(head);
  if (!m) return null;
  const host = (m[1] as string).trim().replace(/:\d+$/, "");
  return /^[A-Za-z0-9._-]{1,253}$/.test(host) ? host : null;
}

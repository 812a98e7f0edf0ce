/** A body read whole, refused past `max` bytes (leaving the loop early ends the source). */
export async function readAll(src: AsyncIterable<Buffer>, max: number): Promise<Buffer> {
  const parts: Buffer[] = [];
  let n = 0;
  for await (const c of src) {
    n += c.length;
    if (n > max) throw new Error(`longer than ${max} bytes`);
    parts.push(c);
  }
  return Buffer.concat(parts, n);
}

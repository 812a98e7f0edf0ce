import { constants } from "node:fs";
import { open } from "node:fs/promises";

/** fsync of a folder: makes a rename or a new entry in it durable. */
export async function fsyncDir(path: string): Promise<void> {
  const fh = await open(path, constants.O_RDONLY);
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

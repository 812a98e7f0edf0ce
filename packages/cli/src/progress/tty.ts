/** A few lines redrawn in place at the bottom of a terminal, with log lines scrolling above. */
export class LiveArea {
  private drawn = 0;
  constructor(private readonly out: NodeJS.WriteStream) {}

  /** Replaces the live lines. */
  draw(lines: string[]): void {
    const cols = this.out.columns || 80;
    this.out.write(this.clear() + lines.map((l) => `${l.slice(0, cols - 1)}\n`).join(""));
    this.drawn = lines.length;
  }

  /** Prints a line above the live area (which the caller then redraws). */
  log(line: string, redraw: string[]): void {
    this.out.write(`${this.clear()}${line}\n`);
    this.drawn = 0;
    this.draw(redraw);
  }

  /** Leaves the live lines as they are, for good. */
  done(): void {
    this.drawn = 0;
  }

  private clear(): string {
    // Up one line and erase it, once per drawn line.
    return "\x1b[1A\x1b[2K".repeat(this.drawn);
  }
}

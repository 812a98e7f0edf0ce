const FRAMES = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

/**
 * Shows `⠋ label (3s)` on stderr while `work` runs, only when stderr is a terminal: pipes and
 * logs get nothing, so scripted output stays clean.
 */
export async function withSpinner<T>(
  label: string,
  work: () => Promise<T>,
  err: NodeJS.WriteStream = process.stderr,
): Promise<T> {
  if (!err.isTTY) return work();
  const t0 = Date.now();
  let i = 0;
  const draw = () => {
    const s = Math.floor((Date.now() - t0) / 1000);
    err.write(`\r\x1b[2K${FRAMES[i++ % FRAMES.length]} ${label}${s ? ` (${s}s)` : ""}`);
  };
  draw();
  const timer = setInterval(draw, 100);
  try {
    return await work();
  } finally {
    clearInterval(timer);
    err.write("\r\x1b[2K");
  }
}

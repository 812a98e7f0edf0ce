import { LayerBoard, parseLayerLine } from "./layers.js";
import { LiveArea } from "./tty.js";

export interface BuildLogEntry {
  level?: string;
  message: string;
}

export interface BuildLogSink {
  (entry: BuildLogEntry): void;
  /** Leaves the bars drawn and stops redrawing. */
  close(): void;
}

/**
 * Build logs on stderr (stdout is kept for the result). On a terminal, layer progress lines
 * become one bar per layer, redrawn in place below the scrolling log; elsewhere every line is
 * printed as it came.
 */
export function buildLogSink(err: NodeJS.WriteStream = process.stderr): BuildLogSink {
  if (!err.isTTY) {
    const plain = (e: BuildLogEntry) => void err.write(`${e.message}\n`);
    return Object.assign(plain, { close: () => undefined });
  }
  const board = new LayerBoard();
  const area = new LiveArea(err);
  const sink = (e: BuildLogEntry) => {
    const layer = parseLayerLine(e.message);
    if (layer) {
      board.update(layer);
      area.draw(board.lines());
    } else {
      area.log(e.level === "error" ? `\x1b[31m${e.message}\x1b[0m` : e.message, board.lines());
    }
  };
  return Object.assign(sink, { close: () => area.done() });
}

import { useEffect, useRef } from "preact/hooks";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";

export interface Series {
  /** Unix seconds. */
  x: number[];
  y: number[];
}

/** One line over time (uPlot: canvas, small, fast with long histories). */
export function TimeChart({ title, unit, data, max }: { title: string; unit: string; data: Series; max?: number }) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot>();
  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const width = () => Math.max(300, el.clientWidth);
    const u = new uPlot(
      {
        width: width(),
        height: 180,
        legend: { show: false },
        scales: { x: { time: true }, y: { range: (_u, lo, hi) => [0, Math.max(max ?? 0, hi, lo + 1)] } },
        axes: [{}, { values: (_u, ticks) => ticks.map((t) => `${Math.round(t * 10) / 10}${unit}`), size: 70 }],
        series: [
          {},
          { label: title, stroke: "#2563eb", fill: "rgba(37,99,235,0.12)", width: 2, points: { show: false } },
        ],
      },
      [data.x, data.y],
      el,
    );
    plot.current = u;
    const ro = new ResizeObserver(() => u.setSize({ width: width(), height: 180 }));
    ro.observe(el);
    return () => {
      ro.disconnect();
      u.destroy();
    };
  }, [title, unit, max]);
  useEffect(() => plot.current?.setData([data.x, data.y]), [data]);
  const last = data.y.at(-1);
  return (
    <figure class="chart" aria-label={`${title} chart`} data-points={data.x.length}>
      <figcaption>
        {title}
        <span class="muted">
          {last === undefined ? " no samples yet" : ` now ${Math.round(last * 10) / 10}${unit}`}
        </span>
      </figcaption>
      <div ref={box} />
    </figure>
  );
}

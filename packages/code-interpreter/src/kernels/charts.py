# Chart data for matplotlib figures, as @e2b/code-interpreter reads a result's `chart`.
#
# The code-interpreter service runs this in every Python kernel it starts (in a namespace of
# its own, not the user's). It registers one more IPython display formatter, for MIME_TYPE:
# whenever a figure is displayed (the inline backend does so at plt.show() and at the end of
# a cell) its bundle carries, beside the PNG, the chart's type, title, axes and data. The
# service maps MIME_TYPE to the result's `chart` field.
#
# Recognised per axes: line charts (Line2D), scatter charts (PathCollection offsets), bar
# charts (the Rectangles of BarContainers) and pie charts (Wedges); other axes with content are
# `unknown`; a figure with several such axes is a `superchart` of them. matplotlib is never
# imported here: a kernel that plots nothing pays nothing.
import json
import math
import re
import sys

MIME_TYPE = "application/vnd.aenv.chart+json"

_UNIT = re.compile(r"(?:\(([^()]*)\)|\[([^\[\]]*)\])\s*$")
_MATHDEFAULT = re.compile(r"\\mathdefault\{(.*)\}")


def _text(s):
    """A title or label, None when empty."""
    s = str(s or "").strip()
    return s or None


def _label(s):
    """An artist's label; matplotlib's own placeholders (`_child0`, `_nolegend_`) are none."""
    s = str(s or "")
    return "" if s.startswith("_") else s


def _unit(label):
    """The unit a label names at its end: `Time (s)` -> `s`, `Power [kW]` -> `kW`."""
    m = _UNIT.search(label or "")
    if not m:
        return None
    return (m.group(1) or m.group(2) or "").strip() or None


def _number(v):
    """A plain JSON number; NaN and infinities (gaps in the data) are null."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _tick_label(s):
    """A tick label as text: log axes format theirs as mathtext (`$\\mathdefault{10^{2}}$`)."""
    s = str(s)
    if len(s) > 1 and s.startswith("$") and s.endswith("$"):
        s = _MATHDEFAULT.sub(r"\1", s[1:-1])
    return s


class _Axis:
    """How one axis's numbers read: its scale, and its values as the user gave them."""

    def __init__(self, ax, axis):
        import matplotlib.category
        import matplotlib.dates

        self.axis = axis
        # get_converter() from matplotlib 3.10 on; the attribute before.
        conv = axis.get_converter() if hasattr(axis, "get_converter") else axis.converter
        self.categories = None
        if isinstance(conv, matplotlib.category.StrCategoryConverter):
            self.scale = "categorical"
            mapping = getattr(axis.units, "_mapping", {}) or {}
            self.categories = {int(i): str(k) for k, i in mapping.items()}
        elif isinstance(conv, matplotlib.dates.DateConverter) or type(conv).__name__ in (
            "_SwitchableDateConverter",
            "ConciseDateConverter",
        ):
            self.scale = "datetime"
        else:
            self.scale = axis.get_scale()
        self._dates = matplotlib.dates

    def value(self, v):
        """A data value on this axis: a category's name, an ISO date, or a number."""
        f = _number(v)
        if f is None:
            return None
        if self.categories is not None:
            return self.categories.get(int(round(f)), _number(f))
        if self.scale == "datetime":
            try:
                return self._dates.num2date(f).isoformat()
            except (ValueError, OverflowError):
                return None
        return f

    def ticks(self, lo, hi):
        """The major ticks within the view, and their labels as the axis formats them."""
        locs = [t for t in self.axis.get_majorticklocs() if _number(t) is not None]
        lo, hi = min(lo, hi), max(lo, hi)
        span = (hi - lo) * 1e-9
        locs = [t for t in locs if lo - span <= t <= hi + span]
        try:
            labels = [_tick_label(s) for s in self.axis.get_major_formatter().format_ticks(locs)]
        except Exception:
            labels = [str(t) for t in locs]
        # Tick positions are computed: 1.2000000000000002 is 1.2.
        return [self.value(float(f"{t:.12g}")) for t in locs], labels


def _axes_2d(ax, kind, title):
    x_label = _text(ax.get_xlabel())
    y_label = _text(ax.get_ylabel())
    return {
        "type": kind,
        "title": title,
        "x_label": x_label,
        "y_label": y_label,
        "x_unit": _unit(x_label),
        "y_unit": _unit(y_label),
    }


def _point_chart(ax, kind, title, series):
    """series: [(label, [(x, y), ...])] in axis units (numbers as matplotlib holds them)."""
    xa, ya = _Axis(ax, ax.xaxis), _Axis(ax, ax.yaxis)
    chart = _axes_2d(ax, kind, title)
    x_ticks, x_tick_labels = xa.ticks(*ax.get_xlim())
    y_ticks, y_tick_labels = ya.ticks(*ax.get_ylim())
    chart.update(
        {
            "x_ticks": x_ticks,
            "x_tick_labels": x_tick_labels,
            "x_scale": xa.scale,
            "y_ticks": y_ticks,
            "y_tick_labels": y_tick_labels,
            "y_scale": ya.scale,
            "elements": [
                {"label": label, "points": [[xa.value(x), ya.value(y)] for x, y in points]}
                for label, points in series
            ],
        }
    )
    return chart


def _bar_chart(ax, title, containers):
    chart = _axes_2d(ax, "bar", title)
    elements = []
    for c in containers:
        horizontal = getattr(c, "orientation", "vertical") == "horizontal"
        # Bars stand at positions on the category axis; their length is the value.
        pos_axis = _Axis(ax, ax.yaxis if horizontal else ax.xaxis)
        group = _label(c.get_label())
        for r in c.patches:
            if horizontal:
                pos, value = r.get_y() + r.get_height() / 2, r.get_width()
            else:
                pos, value = r.get_x() + r.get_width() / 2, r.get_height()
            label = pos_axis.value(pos)
            elements.append({"label": "" if label is None else str(label), "value": _number(value), "group": group})
    chart["elements"] = elements
    return chart


def _pie_chart(ax, title, wedges):
    return {
        "type": "pie",
        "title": title,
        "elements": [
            {"label": _label(w.get_label()), "angle": _number(w.theta2 - w.theta1), "radius": _number(w.r)}
            for w in wedges
        ],
    }


def _has_content(ax):
    return bool(ax.lines or ax.collections or ax.patches or ax.texts or ax.images or ax.artists)


def _axes_chart(ax, title):
    from matplotlib.collections import PathCollection
    from matplotlib.container import BarContainer
    from matplotlib.patches import Wedge

    bars = [c for c in ax.containers if isinstance(c, BarContainer)]
    bar_patches = {id(p) for c in bars for p in c.patches}
    wedges = [p for p in ax.patches if isinstance(p, Wedge)]
    other_patches = [p for p in ax.patches if id(p) not in bar_patches and not isinstance(p, Wedge)]
    lines = [line for line in ax.lines if len(line.get_xydata())]
    scatters = [c for c in ax.collections if isinstance(c, PathCollection)]
    others = [c for c in ax.collections if not isinstance(c, PathCollection)]
    kinds = [k for k, present in (("line", lines), ("scatter", scatters), ("bar", bars), ("pie", wedges)) if present]
    # One kind of data alone is a chart of that kind; anything else is not guessed at.
    if len(kinds) == 1 and not other_patches and not others and not ax.images:
        kind = kinds[0]
        if kind == "line":
            return _point_chart(ax, "line", title, [(_label(l.get_label()), l.get_xydata()) for l in lines])
        if kind == "scatter":
            return _point_chart(ax, "scatter", title, [(_label(c.get_label()), c.get_offsets()) for c in scatters])
        if kind == "bar":
            return _bar_chart(ax, title, bars)
        return _pie_chart(ax, title, wedges)
    return {"type": "unknown", "title": title, "elements": []}


def chart_of(fig):
    """The chart a figure shows (a dict ready for JSON), or None for an empty figure."""
    try:
        axes = [ax for ax in fig.axes if _has_content(ax)]
        if not axes:
            return None
        suptitle = getattr(fig, "_suptitle", None)
        fig_title = _text(suptitle.get_text()) if suptitle is not None else None
        if len(axes) == 1:
            chart = _axes_chart(axes[0], _text(axes[0].get_title()) or fig_title)
        else:
            chart = {
                "type": "superchart",
                "title": fig_title,
                "elements": [_axes_chart(ax, _text(ax.get_title())) for ax in axes],
            }
        # Only plain JSON leaves the kernel (numpy scalars, NaN and dates are converted above).
        return json.loads(json.dumps(chart, allow_nan=False, default=str))
    except Exception:
        # A figure this cannot read still has its PNG; no chart is better than a traceback.
        return None


def _register():
    from IPython import get_ipython
    from IPython.core.formatters import BaseFormatter
    from traitlets import ObjectName, Unicode

    ip = get_ipython()
    if ip is None:
        return

    class ChartFormatter(BaseFormatter):
        format_type = Unicode(MIME_TYPE)
        print_method = ObjectName("_repr_aenv_chart_")
        _return_type = dict

        # Figures are recognised here, not registered with for_type: the inline backend
        # drops every formatter's entry for Figure each time it sets its figure formats
        # (at `import matplotlib.pyplot`, among others).
        def __call__(self, obj):
            figure = sys.modules.get("matplotlib.figure")
            if not self.enabled or figure is None or not isinstance(obj, figure.Figure):
                return None
            return chart_of(obj)

    ip.display_formatter.formatters[MIME_TYPE] = ChartFormatter(parent=ip.display_formatter)


_register()

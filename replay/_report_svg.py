"""The report's charts: inline SVG drawn from numbers, with no script and no external resource.

Each chart is one ``<svg>`` whose every series is one ``<path>`` (bars as rectangles joined into
one path, lines as polylines), so a browser that drew it has non-empty paths to show for it.
Labels are text nodes escaped here; colours come from one fixed palette, in series order.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape as _escape
from typing import Final

from ._terminal import shown


def escape(text: str) -> str:
    """A label escaped, its control and bidirectional characters shown (``shown``), never obeyed."""
    return _escape(shown(text, one_line=True))


__all__ = ["OUTCOMES", "PALETTE", "bars", "colour", "lines", "spans", "stacked"]

PALETTE: Final = (
    "#4269d0",
    "#efb118",
    "#ff725c",
    "#6cc5b0",
    "#3ca951",
    "#ff8ab7",
    "#a463f2",
    "#97bbf5",
    "#9c6b4e",
    "#9498a0",
)
_W: Final = 720
_H: Final = 220
_LEFT: Final = 48
_BOTTOM: Final = 22
_TOP: Final = 8


# How a call ended reads the same on every chart: success green, failure red, unknown amber.
OUTCOMES: Final = {
    "result": "#3ca951",
    "error": "#e0442f",
    "rejected": "#ff8ab7",
    "cancelled": "#9498a0",
    "in_doubt": "#efb118",
    "incomplete": "#c9c9c9",
}


def colour(index: int, name: str = "") -> str:
    """The colour of the series ``name``, the ``index``-th: an outcome's own, else the palette's."""
    return OUTCOMES.get(name) or PALETTE[index % len(PALETTE)]


def _frame(title: str, height: int, body: str, top_value: float, unit: str) -> str:
    plot_h = height - _BOTTOM - _TOP
    ticks = []
    for i in range(5):
        value = top_value * i / 4
        y = _TOP + plot_h - plot_h * i / 4
        label = f"{value:.3g}"
        ticks.append(
            f'<line x1="{_LEFT}" x2="{_W}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
            f'<text x="{_LEFT - 4}" y="{y + 4:.1f}" text-anchor="end">{label}</text>'
        )
    return (
        f'<svg viewBox="0 0 {_W} {height}" role="img" aria-label="{escape(title)}" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>'
        f'{"".join(ticks)}<text x="4" y="{_TOP + 4}" class="unit">{escape(unit)}</text>'
        f"{body}</svg>"
    )


def _axis(labels: Sequence[str], height: int) -> str:
    """The first and last label under the plot (the table beside it has them all)."""
    if not labels:
        return ""
    y = height - 6
    return (
        f'<text x="{_LEFT}" y="{y}">{escape(labels[0])}</text>'
        f'<text x="{_W}" y="{y}" text-anchor="end">{escape(labels[-1])}</text>'
    )


def stacked(
    title: str, labels: Sequence[str], series: Sequence[tuple[str, Sequence[int]]], unit: str
) -> str:
    """Stacked bars, one per label; ``series`` are (name, one value per label), bottom first."""
    n = len(labels)
    totals = [sum(values[i] for _, values in series) for i in range(n)]
    top = max(totals, default=0) or 1
    plot_h = _H - _BOTTOM - _TOP
    step = (_W - _LEFT) / max(n, 1)
    width = max(step * 0.8, 1.0)
    base = [0.0] * n
    paths = []
    for k, (name, values) in enumerate(series):
        d = []
        for i, value in enumerate(values):
            if not value:
                continue
            h = plot_h * value / top
            x = _LEFT + i * step + (step - width) / 2
            y = _TOP + plot_h - base[i] - h
            d.append(f"M{x:.2f} {y:.2f}h{width:.2f}v{h:.2f}h{-width:.2f}Z")
            base[i] += h
        paths.append(
            f'<path d="{"".join(d)}" fill="{colour(k, name)}"><title>{escape(name)}</title></path>'
        )
    return _frame(title, _H, "".join(paths) + _axis(labels, _H), top, unit)


def lines(
    title: str,
    labels: Sequence[str],
    series: Sequence[tuple[str, Sequence[float | None]]],
    unit: str,
) -> str:
    """One polyline per series over the labels; a missing value breaks the line."""
    n = len(labels)
    top = max((v for _, values in series for v in values if v is not None), default=0.0) or 1.0
    plot_h = _H - _BOTTOM - _TOP
    step = (_W - _LEFT) / max(n, 1)
    paths = []
    for k, (name, values) in enumerate(series):
        d = []
        for i, value in enumerate(values):
            if value is None:
                continue
            x = _LEFT + i * step + step / 2
            y = _TOP + plot_h - plot_h * value / top
            joined = i > 0 and values[i - 1] is not None
            alone = not joined and (i + 1 >= n or values[i + 1] is None)
            if alone:  # a point with no neighbour shows as a dash the width of half its bucket
                d.append(f"M{x - step / 4:.2f} {y:.2f}h{step / 2:.2f}")
            else:
                d.append(f"{'L' if joined else 'M'}{x:.2f} {y:.2f}")
        paths.append(
            f'<path d="{"".join(d)}" fill="none" stroke="{colour(k)}" stroke-width="2" '
            f'stroke-linecap="round"><title>{escape(name)}</title></path>'
        )
    return _frame(title, _H, "".join(paths) + _axis(labels, _H), top, unit)


def bars(title: str, items: Sequence[tuple[str, int]], unit: str) -> str:
    """Horizontal bars, one per item, labelled."""
    row = 20
    height = _TOP + row * max(len(items), 1) + _BOTTOM
    top = max((v for _, v in items), default=0) or 1
    left = 220
    d, labels = [], []
    for i, (name, value) in enumerate(items):
        y = _TOP + i * row + 3
        w = (_W - left - 40) * value / top
        if value:
            d.append(f"M{left} {y}h{w:.2f}v{row - 6}h{-w:.2f}Z")
        labels.append(
            f'<text x="{left - 6}" y="{y + 11}" text-anchor="end">{escape(name[:34])}</text>'
            f'<text x="{left + w + 4:.2f}" y="{y + 11}">{value}</text>'
        )
    return (
        f'<svg viewBox="0 0 {_W} {height}" role="img" aria-label="{escape(title)}" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>'
        f'<path d="{"".join(d)}" fill="{colour(0)}"/>{"".join(labels)}'
        f'<text x="{_W}" y="{height - 4}" text-anchor="end" class="unit">{escape(unit)}</text>'
        "</svg>"
    )


def spans(title: str, rows: Sequence[tuple[str, float, float, int]], first: str, last: str) -> str:
    """A timeline: per row (label, start, end in seconds from the first start, colour index)."""
    row = 16
    height = _TOP + row * max(len(rows), 1) + _BOTTOM
    end = max((e for _, _, e, _ in rows), default=0.0) or 1.0
    left = 180
    scale = (_W - left - 8) / end
    by_colour: dict[int, list[str]] = {}
    labels = []
    for i, (name, start, stop, tone) in enumerate(rows):
        y = _TOP + i * row + 2
        w = max((stop - start) * scale, 2.0)
        by_colour.setdefault(tone, []).append(
            f"M{left + start * scale:.2f} {y}h{w:.2f}v{row - 5}h{-w:.2f}Z"
        )
        labels.append(
            f'<text x="{left - 6}" y="{y + 10}" text-anchor="end">{escape(name[:30])}</text>'
        )
    paths = "".join(
        f'<path d="{"".join(d)}" fill="{colour(tone)}"/>' for tone, d in sorted(by_colour.items())
    )
    axis = (
        f'<text x="{left}" y="{height - 6}">{escape(first)}</text>'
        f'<text x="{_W}" y="{height - 6}" text-anchor="end">{escape(last)}</text>'
    )
    return (
        f'<svg viewBox="0 0 {_W} {height}" role="img" aria-label="{escape(title)}" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>'
        f"{paths}{''.join(labels)}{axis}</svg>"
    )

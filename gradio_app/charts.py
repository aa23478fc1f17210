"""The dashboard's metric charts, drawn as SVG by the server: one coloured polyline per series, axes
with their ranges, a legend below. (Gradio's own line plot fixes its colour domain from the empty
frame it first draws and can then draw its lines without any colour, so the dashboard does not use it.)

`metric_frame` turns metrics rows into a long frame (step, value, series); `chart_html` draws it;
`metric_plot` is the component that shows it (the Training tab's loss and mel_top1, the Quickstart
report's validation curve).
"""

from __future__ import annotations

import html
from typing import Any

import gradio as gr
import pandas as pd

LOSS_METRICS = ("loss", "text_loss", "mel_loss", "bpb")
TOP1_METRICS = ("mel_top1",)
VAL_CURVE_METRICS = ("mel_loss", "text_loss")
PALETTE = ("#4c78a8", "#f58518", "#e45756", "#54a24b", "#b279a2", "#9d755d", "#72b7b2", "#eeca3b")
WIDTH, HEIGHT = 640, 240
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 28, 30
LEGEND_ROW = 18
TICKS = 4


def metric_frame(rows: list[dict[str, Any]], names: tuple[str, ...], split: str = "train") -> pd.DataFrame:
    """Return a long DataFrame (step, value, series) of the metrics `names` in metrics.jsonl rows; a
    row without `split` counts as `split`.

    Step and value are numeric columns even when empty.
    """
    steps, values, series = [], [], []
    for row in rows:
        for name in names:
            value = row.get(name)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and isinstance(row.get("step"), int):
                steps.append(row["step"])
                values.append(float(value))
                series.append(f"{row.get('split', split)} {name}")
    return pd.DataFrame({"step": pd.Series(steps, dtype="int64"), "value": pd.Series(values, dtype="float64"),
                         "series": pd.Series(series, dtype="object")})


def _span(low: float, high: float) -> tuple[float, float]:
    """Return (low, high) widened so that a single value still has a range to be drawn in."""
    if high > low:
        return low, high
    pad = abs(low) * 0.05 or 1.0
    return low - pad, high + pad


def _number(value: float) -> str:
    return f"{value:.4g}"


def chart_html(rows: list[dict[str, Any]], names: tuple[str, ...], title: str, split: str = "train") -> str:
    """Return the SVG chart (in a div) of the metrics `names` of `rows`: one polyline per series in the
    order the series first appear, coloured from PALETTE, min/max ticks on both axes, a legend below;
    "no points yet" when there are none."""
    frame = metric_frame(rows, names, split)
    series = list(dict.fromkeys(frame["series"]))
    legend_height = LEGEND_ROW * len(series)
    total = HEIGHT + legend_height
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    parts = [f'<text x="{WIDTH / 2}" y="16" text-anchor="middle" class="lf-chart-title">{html.escape(title)}</text>',
             f'<rect class="lf-plot-area" x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" '
             'stroke="#bbb"/>']
    if frame.empty:
        parts.append(f'<text x="{LEFT + plot_w / 2}" y="{TOP + plot_h / 2}" text-anchor="middle" fill="#888">'
                     'no points yet</text>')
    else:
        x0, x1 = _span(float(frame["step"].min()), float(frame["step"].max()))
        y0, y1 = _span(float(frame["value"].min()), float(frame["value"].max()))

        def x(step: float) -> float:
            return LEFT + (step - x0) / (x1 - x0) * plot_w

        def y(value: float) -> float:
            return TOP + plot_h - (value - y0) / (y1 - y0) * plot_h

        for i in range(TICKS + 1):
            vx, vy = x0 + (x1 - x0) * i / TICKS, y0 + (y1 - y0) * i / TICKS
            step_label = f"{vx:.0f}" if x1 - x0 >= TICKS else _number(vx)  # steps are whole numbers
            parts.append(f'<text x="{x(vx):.1f}" y="{TOP + plot_h + 16}" text-anchor="middle" font-size="11">'
                         f'{step_label}</text>')
            parts.append(f'<text x="{LEFT - 6}" y="{y(vy) + 4:.1f}" text-anchor="end" font-size="11">{_number(vy)}</text>')
        parts.append(f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 2}" text-anchor="middle" font-size="11">step</text>')
        for index, name in enumerate(series):
            colour = PALETTE[index % len(PALETTE)]
            points = frame[frame["series"] == name].sort_values("step")
            coords = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in zip(points["step"], points["value"]))
            parts.append(f'<polyline class="lf-series" data-series="{html.escape(name)}" points="{coords}" fill="none" '
                         f'stroke="{colour}" stroke-width="2.5"/>')
            for s, v in zip(points["step"], points["value"]):
                parts.append(f'<circle cx="{x(s):.1f}" cy="{y(v):.1f}" r="3" fill="{colour}"/>')
            row_y = HEIGHT + LEGEND_ROW * index + 12
            parts.append(f'<g class="lf-legend"><line x1="{LEFT}" x2="{LEFT + 24}" y1="{row_y - 4}" y2="{row_y - 4}" '
                         f'stroke="{colour}" stroke-width="3"/><text x="{LEFT + 30}" y="{row_y}" font-size="12">'
                         f'{html.escape(name)}</text></g>')
    return (f'<div class="lf-chart"><svg viewBox="0 0 {WIDTH} {total}" width="100%" role="img" '
            f'aria-label="{html.escape(title)}" style="max-width:{WIDTH}px;font-family:inherit;fill:currentColor">'
            + "".join(parts) + "</svg></div>")


def metric_plot(names: tuple[str, ...], title: str, elem_id: str) -> gr.HTML:
    """Return the component that shows `chart_html` for the metrics `names` (empty until updated)."""
    return gr.HTML(chart_html([], names, title), elem_id=elem_id)

"""The dashboard's metric charts: one long frame (step, value, series) from metrics rows, and the line
plot every tab draws it with (the Training tab's loss and mel_top1, the Quickstart report's validation curve)."""

from __future__ import annotations

from typing import Any

import gradio as gr
import pandas as pd

LOSS_METRICS = ("loss", "text_loss", "mel_loss", "bpb")
TOP1_METRICS = ("mel_top1",)
VAL_CURVE_METRICS = ("mel_loss", "text_loss")
PALETTE = ("#4c78a8", "#f58518", "#e45756", "#72b7b2", "#54a24b", "#eeca3b", "#b279a2", "#ff9da6", "#9d755d", "#bab0ac")


def metric_frame(rows: list[dict[str, Any]], names: tuple[str, ...], split: str = "train") -> pd.DataFrame:
    """Return a long DataFrame (step, value, series) of the metrics `names` in metrics.jsonl rows; a
    row without `split` counts as `split`.

    Step and value are numeric columns even when empty, so the chart gets quantitative axes (an
    untyped empty frame would make the plot treat every value as its own category).
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


def metric_chart(rows: list[dict[str, Any]], names: tuple[str, ...], split: str = "train") -> dict[str, Any]:
    """Return the update that shows `metric_frame(rows, names, split)` in a `metric_plot`, with a colour per
    series (the order they first appear in).

    The colour map is what makes the lines visible: Gradio's line plot fixes its colour domain when it
    first draws (from the empty frame a plot starts with) and redraws only when a setting such as the
    colour map changes, so without it the lines of a 4-row frame are drawn with no colour at all.
    """
    frame = metric_frame(rows, names, split)
    series = list(dict.fromkeys(frame["series"]))
    colours = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(series)}
    return gr.update(value=frame, color_map=colours)


def metric_plot(names: tuple[str, ...], title: str, elem_id: str, rows: list[dict[str, Any]] | None = None) -> gr.LinePlot:
    """Return a line plot of `metric_frame(rows, names)`: one coloured line per series, legend below."""
    return gr.LinePlot(metric_frame(rows or [], names), x="step", y="value", color="series", title=title, height=260,
                       elem_id=elem_id)

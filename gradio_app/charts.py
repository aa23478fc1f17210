"""The dashboard's metric charts: one long frame (step, value, series) from metrics rows, and the line
plot every tab draws it with (the Training tab's loss and mel_top1, the Quickstart report's validation curve)."""

from __future__ import annotations

from typing import Any

import gradio as gr
import pandas as pd

LOSS_METRICS = ("loss", "text_loss", "mel_loss", "bpb")
TOP1_METRICS = ("mel_top1",)
VAL_CURVE_METRICS = ("mel_loss", "text_loss")


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


def metric_plot(names: tuple[str, ...], title: str, elem_id: str, rows: list[dict[str, Any]] | None = None) -> gr.LinePlot:
    """Return a line plot of `metric_frame(rows, names)`: one coloured line per series, legend below."""
    return gr.LinePlot(metric_frame(rows or [], names), x="step", y="value", color="series", title=title, height=260,
                       elem_id=elem_id)

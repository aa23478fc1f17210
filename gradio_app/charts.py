"""The dashboard's charts: Plotly figures, shown by `gr.Plot`, from the numbers the tabs read — a run's
metrics.jsonl rows, a dataset's duration histogram, a tokenizer's inspect report and size sweep, the
quality measures of evaluated checkpoints and the Compare table's numbers.

Every figure hovers its values, toggles a series from its legend, zooms, rounds its ticks and hover
values, marks each point (a series of one point stays visible) and keeps the zoom and legend choices
across the live refreshes of the same chart (`uirevision`). Measures on different scales get their own
panel: the speech loss, the text loss and the LM's bits per byte never share an axis, and a loss whose
weight in the run is 0 (it is not trained) is not drawn. Nothing here reads files; the tabs do.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import gradio as gr
import plotly.graph_objects as go
from plotly.subplots import make_subplots

SPLITS = {"train": "training", "val": "validation"}  # a metrics row's split → its words in a legend
SPLIT_COLOURS = {"train": "#4c78a8", "val": "#f58518"}
COLOURS = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#b279a2", "#72b7b2", "#9d755d", "#eeca3b")
PANEL_HEIGHT = 260
MIN_HEIGHT = 340
MARKED_POINTS = 40  # a series of at most this many points marks each one (a longer one is a plain line)
LISTED_STEPS = 8  # a step axis with at most this many distinct steps ticks exactly those steps
HOVER = "%{y:.4~g}"
FONT = dict(size=13)


class Measure:
    """A metric as the charts show it: its metrics.jsonl key, its words, and the loss weight that trains it."""

    def __init__(self, key: str, words: str, weight: str | None = None) -> None:
        self.key, self.words, self.weight = key, words, weight


SPEECH_LOSS = Measure("mel_loss", "speech loss (speech codes)", "mel_weight")
TEXT_LOSS = Measure("text_loss", "text loss (next text piece)", "text_weight")
LOSS = Measure("loss", "loss")
BITS_PER_BYTE = Measure("bpb", "bits per byte")
SPEECH_TOP1 = Measure("mel_top1", "speech codes predicted right (share)")
LOSS_MEASURES = (SPEECH_LOSS, TEXT_LOSS, LOSS, BITS_PER_BYTE)
TOP1_MEASURES = (SPEECH_TOP1,)


def loss_weights(config: Mapping[str, Any] | None) -> dict[str, float]:
    """Return the `loss:` weights of a run config mapping ({} when it sets none: every loss is drawn)."""
    loss = (config or {}).get("loss")
    if not isinstance(loss, Mapping):
        return {}
    return {key: float(value) for key, value in loss.items()
            if key in ("text_weight", "mel_weight") and isinstance(value, (int, float)) and not isinstance(value, bool)}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def drawn_measures(rows: Sequence[Mapping[str, Any]], measures: Sequence[Measure],
                   weights: Mapping[str, float] | None = None) -> tuple[list[Measure], list[str]]:
    """Return (the measures of `measures` a chart of `rows` draws, a note per measure left out).

    A measure is drawn when a row holds it, unless its loss weight in `weights` is 0 (not trained);
    the total `loss` is left out when the speech or text loss is drawn (it is their weighted sum).
    """
    weights = weights or {}
    present = [m for m in measures if any(_number(row.get(m.key)) for row in rows)]
    notes = [f"{m.words}: not drawn, its weight in this run is 0 (not trained)" for m in present
             if m.weight and weights.get(m.weight) == 0]
    kept = [m for m in present if not (m.weight and weights.get(m.weight) == 0)]
    if any(m.weight for m in kept):
        kept = [m for m in kept if m is not LOSS]
    return kept, notes


def metric_series(rows: Sequence[Mapping[str, Any]], measure: Measure, split: str,
                  default_split: str = "train") -> tuple[list[int], list[float]]:
    """Return (steps, values) of `measure` in the rows of `split` (a row without `split` counts as
    `default_split`), in step order; a step logged twice keeps its last value."""
    points: dict[int, float] = {}
    for row in rows:
        if row.get("split", default_split) == split and _number(row.get(measure.key)) and isinstance(row.get("step"), int):
            points[row["step"]] = float(row[measure.key])
    steps = sorted(points)
    return steps, [points[step] for step in steps]


def _style(figure: go.Figure, title: str, height: int, note: str = "") -> go.Figure:
    """Give `figure` the dashboard's look: `title` (and `note` under it) at the top left, the legend under the
    plot, rounded ticks, and zoom and legend choices kept across updates of the same chart."""
    top = 84 if note else 56
    figure.update_layout(
        title=dict(text=title, x=0.01, xanchor="left", font=dict(size=15),
                   subtitle=dict(text=note, font=dict(size=12, color="#666"))),
        height=height + 60, template="plotly_white", font=FONT, margin=dict(l=70, r=24, t=top, b=110),
        hovermode="x unified", uirevision=title,
        legend=dict(orientation="h", yanchor="top", y=-0.22 * MIN_HEIGHT / height, xanchor="left", x=0),
    )
    figure.update_xaxes(tickformat="~g", hoverformat="~g", showline=True, linecolor="#bbb")
    figure.update_yaxes(tickformat="~g", showline=True, linecolor="#bbb", zeroline=False)
    return figure


def _mode(points: Sequence[Any]) -> str:
    return "lines+markers" if len(points) <= MARKED_POINTS else "lines"


def _step_ticks(figure: go.Figure, steps: Iterable[int]) -> None:
    """Tick exactly the steps drawn when they are few (no "1999.5" between two checkpoints)."""
    distinct = sorted(set(steps))
    if 0 < len(distinct) <= LISTED_STEPS:
        figure.update_xaxes(tickmode="array", tickvals=distinct, ticktext=[f"{step:,}" for step in distinct])


def empty_figure(title: str, message: str = "no points yet") -> go.Figure:
    """Return a titled figure with no axes that says `message` in its middle."""
    figure = go.Figure()
    figure.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper",
                          font=dict(size=14, color="#888"))
    _style(figure, title, MIN_HEIGHT // 2)
    figure.update_xaxes(visible=False)
    figure.update_yaxes(visible=False)
    return figure


def metrics_figure(rows: Sequence[Mapping[str, Any]], measures: Sequence[Measure], title: str,
                   weights: Mapping[str, float] | None = None, default_split: str = "train") -> go.Figure:
    """Return the chart of a run's metrics rows: one panel per drawn measure (`drawn_measures`) over the
    step, one line per split in it (training, then validation), named `<measure> · <split>`."""
    kept, notes = drawn_measures(rows, measures, weights)
    if not kept:
        return empty_figure(title, "; ".join(notes) or "no points yet")
    titles = [m.words for m in kept] if len(kept) > 1 else None
    figure = make_subplots(rows=len(kept), cols=1, shared_xaxes=True, vertical_spacing=0.14, subplot_titles=titles)
    steps_drawn: list[int] = []
    for index, measure in enumerate(kept, start=1):
        for split, words in SPLITS.items():
            steps, values = metric_series(rows, measure, split, default_split)
            if steps:
                steps_drawn += steps
                figure.add_trace(go.Scatter(
                    x=steps, y=values, name=f"{measure.words} · {words}", mode=_mode(steps),
                    line=dict(color=SPLIT_COLOURS[split], width=2.5), marker=dict(size=7),
                    hovertemplate=HOVER), row=index, col=1)
        figure.update_yaxes(title_text=measure.words.split(" (")[0], row=index, col=1)
    figure.update_xaxes(title_text="step", row=len(kept), col=1)
    _step_ticks(figure, steps_drawn)
    return _style(figure, title, max(MIN_HEIGHT, PANEL_HEIGHT * len(kept)), "; ".join(notes))


def bar_figure(labels: Sequence[str], values: Sequence[float], title: str, x_title: str, y_title: str,
               percent: bool = False) -> go.Figure:
    """Return a bar chart of `values` at the category `labels`, in the order given (each bar's value on it)."""
    if not labels:
        return empty_figure(title)
    text = [f"{v:.1%}" if percent else f"{v:.4g}" for v in values]
    figure = go.Figure(go.Bar(x=list(labels), y=list(values), text=text, textposition="outside", cliponaxis=False,
                              marker_color=COLOURS[0], name=y_title,
                              hovertemplate="%{x}: " + ("%{y:.1%}" if percent else "%{y:,.4~g}") + "<extra></extra>"))
    _style(figure, title, MIN_HEIGHT)
    figure.update_layout(hovermode="closest", showlegend=False, margin=dict(b=60))
    figure.update_xaxes(type="category", title_text=x_title)
    figure.update_yaxes(title_text=y_title, rangemode="tozero", tickformat=".0%" if percent else "~g")
    return figure


def histogram_figure(histogram: Mapping[str, int]) -> go.Figure:
    """Return the duration histogram of a dataset's summary.json (`filters.duration_histogram`: "0-1" → clips)."""
    return bar_figure([f"{span} s" for span in histogram], [int(v) for v in histogram.values()], "Clip durations",
                      "duration", "clips")


def sweep_figure(rows: Sequence[Mapping[str, Any]]) -> go.Figure:
    """Return the tokenizer size sweep's chart: characters per token and the share of the vocabulary never
    used, each over the vocabulary size in its own panel (a size that failed is left out)."""
    done = sorted((r for r in rows if r.get("error") is None and _number(r.get("chars_per_token"))),
                  key=lambda r: r["size"])
    title = "Vocabulary size sweep"
    if not done:
        return empty_figure(title)
    figure = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.16,
                           subplot_titles=["characters per token (higher: shorter sequences)",
                                           "vocabulary never used (lower: fewer wasted rows)"])
    sizes = [int(r["size"]) for r in done]
    figure.add_trace(go.Scatter(x=sizes, y=[float(r["chars_per_token"]) for r in done], name="characters per token",
                                mode="lines+markers", marker=dict(size=8), line=dict(color=COLOURS[0]),
                                hovertemplate=HOVER), row=1, col=1)
    figure.add_trace(go.Scatter(x=sizes, y=[float(r["unused_share"]) for r in done], name="never used",
                                mode="lines+markers", marker=dict(size=8), line=dict(color=COLOURS[1]),
                                hovertemplate="%{y:.1%}"), row=2, col=1)
    figure.update_yaxes(tickformat=".0%", row=2, col=1)
    figure.update_xaxes(title_text="vocabulary size", row=2, col=1)
    figure.update_xaxes(tickmode="array", tickvals=sizes, ticktext=[f"{size:,}" for size in sizes])
    return _style(figure, title, 2 * PANEL_HEIGHT)


def measures_figure(panels: Mapping[str, Sequence[tuple[int, float]]], title: str, columns: int = 2) -> go.Figure:
    """Return one small panel per measure (`panels`: its words → (step, value) points) over the step, laid
    out `columns` wide, each panel titled with its measure."""
    filled = {name: sorted(points) for name, points in panels.items() if points}
    if not filled:
        return empty_figure(title, "no evaluated checkpoint yet")
    count = len(filled)
    rows = -(-count // columns)
    figure = make_subplots(rows=rows, cols=min(columns, count), subplot_titles=list(filled), vertical_spacing=0.6 / rows,
                           horizontal_spacing=0.12)
    for index, (name, points) in enumerate(filled.items()):
        figure.add_trace(go.Scatter(
            x=[step for step, _ in points], y=[value for _, value in points], name=name, mode="lines+markers",
            marker=dict(size=9), line=dict(color=COLOURS[index % len(COLOURS)], width=2.5), hovertemplate=HOVER),
            row=index // columns + 1, col=index % columns + 1)
    figure.update_xaxes(title_text="step")
    _step_ticks(figure, [step for points in filled.values() for step, _ in points])
    _style(figure, title, max(MIN_HEIGHT, 280 * rows))
    figure.update_layout(showlegend=False, hovermode="closest", margin=dict(b=60))
    return figure


def compare_figure(checkpoints: Sequence[str], measures: Mapping[str, Sequence[float | None]],
                   ceilings: Mapping[str, float | None]) -> go.Figure:
    """Return the Compare chart: one panel per measure (its words → one value per checkpoint, None when not
    measured) with a bar per checkpoint in the order given, and the codec's ceiling as a dashed line."""
    title = "Evaluated checkpoints"
    names = [name for name, values in measures.items() if any(v is not None for v in values)]
    if not checkpoints or not names:
        return empty_figure(title, "no evaluated checkpoint yet")
    figure = make_subplots(rows=1, cols=len(names), subplot_titles=names, horizontal_spacing=0.14)
    for col, name in enumerate(names, start=1):
        values = [None if v is None else float(v) for v in measures[name]]
        figure.add_trace(go.Bar(x=list(checkpoints), y=values, name=name, marker_color=COLOURS[col - 1],
                                hovertemplate="%{x}: %{y:.4~g}<extra></extra>"), row=1, col=col)
        ceiling = ceilings.get(name)
        if ceiling is not None:
            figure.add_trace(go.Scatter(  # a dash across each bar: visible for one checkpoint too
                x=list(checkpoints), y=[float(ceiling)] * len(checkpoints), mode="lines+markers",
                name=f"{name} · codec ceiling", line=dict(color="#555", dash="dash"),
                marker=dict(symbol="line-ew", size=70, line=dict(width=3, color="#555")),
                hovertemplate="codec ceiling: %{y:.4~g}<extra></extra>"), row=1, col=col)
        figure.update_xaxes(type="category", row=1, col=col)
    _style(figure, title, MIN_HEIGHT)
    figure.update_layout(hovermode="closest")
    return figure


def plot(elem_id: str, figure: go.Figure | None = None) -> gr.Plot:
    """Return the component a chart is shown in (no label above it: the figure carries its title)."""
    return gr.Plot(figure, show_label=False, elem_id=elem_id, elem_classes=["lf-chart"])



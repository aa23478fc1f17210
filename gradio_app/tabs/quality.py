"""Quality tab: the quality report of each evaluated checkpoint of a run (eval.json, written by `eval tts`
and by periodic evaluation) — a table with each failure flag in words, a chart per measure over steps,
the audio of every evaluation sentence, and from status.json why `best.pt` is best and the
base-language retention warning. Reading is `core.eval.tts.collect_evaluations`; nothing is computed here."""

from __future__ import annotations

from typing import Any

import gradio as gr

from core.eval.tts import collect_evaluations
from core.structured import loads_json, read_json_file
from gradio_app.charts import measures_figure, plot
from gradio_app.common import UIContext, inside_workspace, ui_action
from gradio_app.tabs.compare import eval_folders, newest_eval_folder

FLAGS = ("no_stop", "length_out_of_range", "loops", "prompt_copying", "text_ignored")
MEASURES = {"dtw_identification": "sentence identification (DTW)", "speaker_similarity": "speaker similarity",
            "mos_estimate": "MOS estimate (DNSMOS)", "cer": "character error rate (speech recogniser)",
            "flags_raised": "failure flags raised", "val_base_loss": "base-language validation loss"}
HEADERS = ["checkpoint", "step", *(f.replace("_", " ") for f in FLAGS), "speaker similarity", "MOS estimate",
           "character error rate", "sentence identification", "base language"]
# shares of the page's width, 100 % in all, so every column (the base language's last) shows without scrolling;
# the words wrap inside them
COLUMN_WIDTHS = ["11%", "4%", *["8%"] * len(FLAGS), "7%", "7%", "7%", "10%", "14%"]
CHART_TITLE = "Quality of the evaluated checkpoints"
MEASURE_WORDS = (
    "**How to read it.** Each failure flag says in words what it measured: *no stop* (the model never ended a "
    "sentence), *length out of range* (speech far longer or shorter than the text needs), *loops* (a stretch "
    "repeated), *prompt copying* (the voice prompt spoken back), *text ignored* (speech that does not follow its "
    "sentence). *Sentence identification*: the share of sentences whose speech is closest to its own reference "
    "after dynamic time warping. *Speaker similarity*: how alike the voice prompt and the output sound (1 is the "
    "same). *MOS estimate*: a predicted listening score from 1 to 5. *Base language*: the same checks on the "
    "language the model knew before.")
MAX_SENTENCES = 40  # players shown: one per evaluation sentence


def flag_words(flag: dict[str, Any] | None) -> str:
    """Return a flag in words: `ok — …` or `FLAG — …`; `-` when the entry has no such flag."""
    if not flag:
        return "-"
    return f"{'FLAG' if flag['flagged'] else 'ok'} — {flag['words']}"


def _dash(value: Any) -> Any:
    return "-" if value is None else value


def base_words(section: dict[str, Any] | None, retention: dict[str, Any] | None = None) -> str:
    """Return the base-language section of a periodic evaluation in words: its flags and DTW identification, and
    the verdict on what it kept (the entry's `retention` record) where measured; its note when it was skipped;
    `-` when the entry has none."""
    if not section:
        return "-"
    if section.get("flags_raised") is None:
        return f"{section.get('language')}: {section.get('note') or 'not evaluated'}"
    raised = section["flags_raised"]
    flags = f"FLAG — {', '.join(flag.replace('_', ' ') for flag in raised)}" if raised else "ok — no flag"
    kept = f"; {retention['words']}" if retention and retention.get("words") else ""
    return (f"{section['language']} ({section.get('used')} sentences): {flags}, sentence identification "
            f"{_dash(section.get('dtw_identification'))}{kept}")


def quality_rows(summaries: list[dict[str, Any]]) -> list[list[Any]]:
    """Return the table rows of evaluated checkpoints: each flag in words, the listeners' numbers, then the
    base-language section in words."""
    rows = []
    for s in summaries:
        q = s["quality"]
        flags = q.get("flags") or {}
        rows.append([s["checkpoint"], s["step"], *(flag_words(flags.get(f)) for f in FLAGS),
                     _dash(q.get("speaker_similarity")), _dash(q.get("mos_estimate")), _dash(q.get("cer")),
                     _dash(s["dtw_identification"]), base_words((s.get("sections") or {}).get("base_language"), s.get("retention"))])
    return rows


def measure_points(summaries: list[dict[str, Any]], retention: dict[int, float]) -> dict[str, list[tuple[int, float]]]:
    """Return each measure's words (MEASURES) → its (step, value) points over the evaluated checkpoints;
    `retention` maps step → val_base_loss."""
    points: dict[str, list[tuple[int, float]]] = {words: [] for words in MEASURES.values()}
    for s in summaries:
        q = s["quality"]
        values = {"dtw_identification": s["dtw_identification"], "speaker_similarity": q.get("speaker_similarity"),
                  "mos_estimate": q.get("mos_estimate"), "cer": q.get("cer"),
                  "flags_raised": len(q["flags_raised"]) if "flags_raised" in q else None,
                  "val_base_loss": retention.get(s["step"])}
        for key, value in values.items():
            if value is not None and s["step"] is not None:
                points[MEASURES[key]].append((int(s["step"]), float(value)))
    return points


def run_status(folder: Any) -> dict[str, Any]:
    """Return the status.json of the run `folder` belongs to ({} when there is none or it is unreadable)."""
    path = folder / "status.json"
    try:
        return read_json_file(path) if path.is_file() else {}
    except (OSError, ValueError):
        return {}


def eval_base_losses(folder: Any) -> dict[int, float]:
    """Return step → val_base_loss from the run's metrics.jsonl eval lines ({} when absent)."""
    path = folder / "metrics.jsonl"
    found: dict[int, float] = {}
    if not path.is_file():
        return found
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = loads_json(line, "metrics line")
        except ValueError:
            continue
        if record.get("split") == "eval" and "val_base_loss" in record:
            found[int(record["step"])] = float(record["val_base_loss"])
    return found


def status_note(status: dict[str, Any]) -> str:
    """Return the Markdown that says why best.pt is best and whether the base language is being forgotten."""
    lines = []
    best = status.get("best") or {}
    if best.get("why"):
        lines.append(f"**best.pt** — {best['why']}")
        parts = best.get("parts") or {}
        if parts:
            measure = parts["intelligibility"]
            flags = ", ".join(flag.replace("_", " ") for flag in parts["flags_raised"]) or "none"
            lines.append(f"Score, compared in this order: failure flags {flags} · "
                         f"{MEASURES.get(measure['measure'], measure['measure'])} {_dash(measure['value'])} · "
                         f"validation loss {_dash(parts['val_loss'])}")
    elif best:
        lines.append(f"**best.pt** — step {best.get('step')} by {best.get('metric')} {best.get('value')}")
    retention = status.get("retention") or {}
    if retention.get("warning"):
        lines.append(f"⚠️ **Base language:** {retention['warning']}")
    elif retention:
        lines.append(f"Base language: validation loss {retention['val_base_loss']} ({retention['change']:+.1%} since step 0)")
    return "\n\n".join(lines)


def build(ctx: UIContext, demo: gr.Blocks) -> None:
    """Lay out the Quality tab; the dropdown's first run is shown when the page loads."""
    settings = ctx.settings

    @ui_action(outputs=5, message=3)
    def load(folder: str | None):
        if not folder or folder not in eval_folders(ctx):
            return ([], [], gr.update(choices=[], value=None), "Pick a run with evaluated checkpoints.",
                    measures_figure({}, CHART_TITLE))
        path = inside_workspace(settings, folder, "run or folder")
        summaries = collect_evaluations(path)
        points = measure_points(summaries, eval_base_losses(path))  # a run folder holds metrics.jsonl and status.json
        names = [s["checkpoint"] for s in summaries]
        note = status_note(run_status(path)) or f"{len(summaries)} evaluated checkpoint(s)."
        return (quality_rows(summaries), summaries, gr.update(choices=names, value=names[-1] if names else None), note,
                measures_figure(points, CHART_TITLE))

    def players(summaries: list[dict[str, Any]], checkpoint: str | None) -> list[Any]:
        chosen = next((s for s in summaries if s["checkpoint"] == checkpoint), None)
        updates = []
        for i in range(MAX_SENTENCES):
            if chosen is not None and i < len(chosen["audio"]) and chosen["audio"][i]:
                text = chosen["sentences"][i] if i < len(chosen["sentences"]) else ""
                updates.append(gr.update(value=chosen["audio"][i], visible=True, label=f"{i + 1}. {text}"))
            else:
                updates.append(gr.update(value=None, visible=False))
        return updates

    with gr.Tab("Quality", id="quality") as tab:
        with gr.Row():
            folder = gr.Dropdown(eval_folders(ctx), value=newest_eval_folder(ctx), label="Evaluated run or folder",
                                 allow_custom_value=True, elem_id="q-folder", scale=4)
            refresh = gr.Button("Refresh", size="sm", scale=1)
        note = gr.Markdown(elem_id="q-note")
        table = gr.Dataframe(headers=HEADERS, value=[], interactive=False, wrap=True, elem_id="q-table",
                             column_widths=COLUMN_WIDTHS)
        gr.Markdown(MEASURE_WORDS, elem_id="q-words")
        summaries = gr.State([])
        chart = plot("q-chart", measures_figure({}, CHART_TITLE))
        checkpoint = gr.Dropdown([], label="Checkpoint (audio of each evaluation sentence)", elem_id="q-checkpoint")
        audios = [gr.Audio(type="filepath", interactive=False, visible=False, elem_id=f"q-audio-{i}")
                  for i in range(MAX_SENTENCES)]

    outputs = [table, summaries, checkpoint, note, chart]

    def opened(current: str | None) -> Any:
        """The folders when the tab opens or the page loads; with none chosen yet, the newest evaluation."""
        return gr.update(choices=eval_folders(ctx), value=current or newest_eval_folder(ctx))

    folder.change(load, folder, outputs)
    demo.load(opened, folder, folder).then(load, folder, outputs)
    tab.select(opened, folder, folder, show_progress="hidden").then(load, folder, outputs)
    refresh.click(lambda: gr.update(choices=eval_folders(ctx)), None, folder).then(load, folder, outputs)
    checkpoint.change(players, [summaries, checkpoint], audios)

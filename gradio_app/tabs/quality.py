"""Quality tab: the quality report of each evaluated checkpoint of a run (eval.json, written by `eval tts`
and by periodic evaluation) — a table with each failure flag in words, a chart per measure over steps,
the audio of every evaluation sentence, and from status.json why `best.pt` is best and the
base-language retention warning. Reading is `core.eval.tts.collect_evaluations`; nothing is computed here."""

from __future__ import annotations

import json
from typing import Any

import gradio as gr
import pandas as pd

from core.eval.tts import collect_evaluations
from gradio_app.common import UIContext, inside_workspace, ui_action
from gradio_app.tabs.compare import eval_folders

FLAGS = ("no_stop", "length_out_of_range", "loops", "prompt_copying", "text_ignored")
MEASURES = {"dtw_identification": "DTW sentence identification", "speaker_similarity": "speaker similarity",
            "mos_estimate": "MOS estimate (DNSMOS)", "cer": "CER (eval.asr)", "flags_raised": "flags raised",
            "val_base_loss": "base-language val loss"}
HEADERS = ["checkpoint", "step", *(f.replace("_", " ") for f in FLAGS), "speaker similarity", "MOS estimate", "CER",
           "DTW id", "base language"]
MAX_SENTENCES = 40  # players shown: one per evaluation sentence


def flag_words(flag: dict[str, Any] | None) -> str:
    """Return a flag in words: `ok — …` or `FLAG — …`; `-` when the entry has no such flag."""
    if not flag:
        return "-"
    return f"{'FLAG' if flag['flagged'] else 'ok'} — {flag['words']}"


def _dash(value: Any) -> Any:
    return "-" if value is None else value


def base_words(section: dict[str, Any] | None) -> str:
    """Return the base-language section of a periodic evaluation in words: its flags and DTW identification,
    or its note when it was skipped; `-` when the entry has none."""
    if not section:
        return "-"
    if section.get("flags_raised") is None:
        return f"{section.get('language')}: {section.get('note') or 'not evaluated'}"
    raised = section["flags_raised"]
    flags = f"FLAG — {', '.join(raised)}" if raised else "ok — no flag"
    return f"{section['language']} ({section.get('used')} sentences): {flags}, DTW id {_dash(section.get('dtw_identification'))}"


def quality_rows(summaries: list[dict[str, Any]]) -> list[list[Any]]:
    """Return the table rows of evaluated checkpoints: each flag in words, the listeners' numbers, then the
    base-language section in words."""
    rows = []
    for s in summaries:
        q = s["quality"]
        flags = q.get("flags") or {}
        rows.append([s["checkpoint"], s["step"], *(flag_words(flags.get(f)) for f in FLAGS),
                     _dash(q.get("speaker_similarity")), _dash(q.get("mos_estimate")), _dash(q.get("cer")),
                     _dash(s["dtw_identification"]), base_words((s.get("sections") or {}).get("base_language"))])
    return rows


def measure_frame(summaries: list[dict[str, Any]], retention: dict[int, float]) -> pd.DataFrame:
    """Return the long table (step, measure, value) the charts plot; `retention` maps step → val_base_loss."""
    records = []
    for s in summaries:
        q = s["quality"]
        values = {"dtw_identification": s["dtw_identification"], "speaker_similarity": q.get("speaker_similarity"),
                  "mos_estimate": q.get("mos_estimate"), "cer": q.get("cer"),
                  "flags_raised": len(q["flags_raised"]) if "flags_raised" in q else None,
                  "val_base_loss": retention.get(s["step"])}
        records += [{"step": s["step"], "measure": MEASURES[k], "value": float(v)} for k, v in values.items() if v is not None]
    return pd.DataFrame(records, columns=["step", "measure", "value"])


def run_status(folder: Any) -> dict[str, Any]:
    """Return the status.json of the run `folder` belongs to ({} when there is none or it is unreadable)."""
    path = folder / "status.json"
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
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
            record = json.loads(line)
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
            lines.append(f"Score, compared in this order: failure flags {', '.join(parts['flags_raised']) or 'none'} · "
                         f"{measure['measure']} {_dash(measure['value'])} · val loss {_dash(parts['val_loss'])}")
    elif best:
        lines.append(f"**best.pt** — step {best.get('step')} by {best.get('metric')} {best.get('value')}")
    retention = status.get("retention") or {}
    if retention.get("warning"):
        lines.append(f"⚠️ **Base language:** {retention['warning']}")
    elif retention:
        lines.append(f"Base language: val_base_loss {retention['val_base_loss']} ({retention['change']:+.1%} since step 0)")
    return "\n\n".join(lines)


def build(ctx: UIContext, demo: gr.Blocks) -> None:
    """Lay out the Quality tab; the dropdown's first run is shown when the page loads."""
    settings = ctx.settings

    @ui_action(outputs=4 + len(MEASURES), message=3)
    def load(folder: str | None):
        if not folder or folder not in eval_folders(ctx):
            empty = pd.DataFrame(columns=["step", "measure", "value"])
            return ([], [], gr.update(choices=[], value=None), "Pick a run with evaluated checkpoints.",
                    *(gr.update(value=empty) for _ in MEASURES))
        path = inside_workspace(settings, folder, "run or folder")
        summaries = collect_evaluations(path)
        frame = measure_frame(summaries, eval_base_losses(path))  # a run folder holds metrics.jsonl and status.json
        names = [s["checkpoint"] for s in summaries]
        note = status_note(run_status(path)) or f"{len(summaries)} evaluated checkpoint(s)."
        charts = [gr.update(value=frame[frame["measure"] == label]) for label in MEASURES.values()]
        return (quality_rows(summaries), summaries, gr.update(choices=names, value=names[-1] if names else None), note,
                *charts)

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

    with gr.Tab("Quality", id="quality"):
        with gr.Row():
            folder = gr.Dropdown(eval_folders(ctx), label="Run or folder (with eval.json)", allow_custom_value=True,
                                 elem_id="q-folder", scale=4)
            refresh = gr.Button("Refresh", size="sm", scale=1)
        note = gr.Markdown(elem_id="q-note")
        table = gr.Dataframe(headers=HEADERS, value=[], interactive=False, wrap=True, elem_id="q-table")
        summaries = gr.State([])
        with gr.Row():
            charts = [gr.LinePlot(x="step", y="value", title=label, elem_id=f"q-chart-{key}")
                      for key, label in MEASURES.items()]
        checkpoint = gr.Dropdown([], label="Checkpoint (audio of each evaluation sentence)", elem_id="q-checkpoint")
        audios = [gr.Audio(type="filepath", interactive=False, visible=False, elem_id=f"q-audio-{i}")
                  for i in range(MAX_SENTENCES)]

    outputs = [table, summaries, checkpoint, note, *charts]
    folder.change(load, folder, outputs)
    demo.load(load, folder, outputs)  # the dropdown starts on its first run, which fires no change
    refresh.click(lambda: gr.update(choices=eval_folders(ctx)), None, folder).then(load, folder, outputs)
    checkpoint.change(players, [summaries, checkpoint], audios)

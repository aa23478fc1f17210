"""Inference tab, "Compare checkpoints": the eval.json numbers of a run's (or folder's) checkpoints in
one table, a player per checkpoint for each held-out sentence, and an `eval.tts` job for one
checkpoint. Reading eval.json is `core.eval.tts.collect_evaluations`; nothing is computed here."""

from __future__ import annotations

from typing import Any

import gradio as gr

import plotly.graph_objects as go

from core.eval.tts import ESPEAK, collect_evaluations
from core.errors import InputError
from core.runs import run_folder_of_checkpoint
from core.workspace_files import CHECKPOINTS, CORPORA, EVALUATIONS, TRAINING_MANIFESTS, find_files
from gradio_app.charts import compare_figure, plot
from gradio_app.common import UIContext, follow_job, inside_workspace, job_line, long_action, relative, require_success
from gradio_app.common import ui_action

MAX_PLAYERS = 8  # players shown per sentence: the newest checkpoints
HEADERS = ["checkpoint", "step", "MCD (dB)", "DTW id accuracy", "PocketSphinx id accuracy", "WER",
           "codec MCD (dB)", "codec DTW id accuracy", "codec PocketSphinx id accuracy", "chance"]
KEYS = ["checkpoint", "step", "mcd_db", "dtw_identification", "sphinx_identification", "wer",
        "codec_mcd_db", "codec_dtw_identification", "codec_sphinx_identification", "chance"]


METRIC_WORDS = (
    "**How to read it.** *MCD* (mel cepstral distortion, dB): how far the synthesized sound is from the reference "
    "recording of the same sentence; lower is better. *DTW identification*: for each sentence, is the synthesized "
    "clip closest (after dynamic time warping, which lines up different speaking speeds) to its own reference among "
    "all references? The share of sentences where it is; `chance` is what guessing gets. *PocketSphinx "
    "identification*: the same with a speech recogniser's reading. The *codec* rows are the ceiling: the references "
    "passed through the codec alone. *RTF* (real-time factor, in the Quickstart report): seconds of computing per "
    "second of audio; below 1 is faster than real time."
)


def eval_folders(ctx: UIContext) -> list[str]:
    """Return the runs and folders that hold an eval.json, workspace-relative (a run by its run folder)."""
    folders = set()
    for path in find_files(ctx.settings, EVALUATIONS):
        parts = path.split("/")
        folders.add("/".join(parts[:2]) if parts[0] == "runs" and len(parts) == 4 else "/".join(parts[:-1]) or ".")
    return sorted(folders)


def newest_eval_folder(ctx: UIContext) -> str | None:
    """Return the run or folder (as `eval_folders` names it) whose eval.json was written last, or None."""
    newest = max(find_files(ctx.settings, EVALUATIONS), default=None,
                 key=lambda path: ctx.settings.resolve(path).stat().st_mtime)
    if newest is None:
        return None
    return next((folder for folder in eval_folders(ctx)
                 if newest == f"{folder}/eval.json" or newest.startswith(f"{folder}/checkpoints/")), None)


CHART_MEASURES = {"mcd_db": "MCD in dB (lower is better)", "dtw_identification": "sentence identification (DTW)"}


def comparison_figure(summaries: list[dict[str, Any]]) -> go.Figure:
    """Return the Compare chart: MCD and DTW identification of each evaluated checkpoint (step order), with
    the newest codec ceiling of each as a dashed line."""
    labels = [f"{s['checkpoint']} (step {s['step']})" for s in summaries]
    measures = {words: [s.get(key) for s in summaries] for key, words in CHART_MEASURES.items()}
    ceilings = {words: next((s.get(f"codec_{key}") for s in reversed(summaries) if s.get(f"codec_{key}") is not None),
                            None) for key, words in CHART_MEASURES.items()}
    return compare_figure(labels, measures, ceilings)


def comparison(ctx: UIContext, folder: str | None) -> tuple[list[list[Any]], list[dict[str, Any]]]:
    """Return the table rows and the summaries of the checkpoints evaluated in `folder`.

    Raises InputError when `folder` is not one of `eval_folders` (the loader opens only what it lists).
    """
    if not folder:
        return [], []
    if folder not in eval_folders(ctx):
        raise InputError(f"{folder!r} is not one of the listed runs and folders with an eval.json; pick one from "
                         "the list (Refresh).")
    summaries = collect_evaluations(inside_workspace(ctx.settings, folder, "run or folder"))
    rows = [[s[k] if s[k] is not None else "-" for k in KEYS] for s in summaries]
    for row, summary in zip(rows, summaries):
        if not summary["exists"]:
            row[0] = f"{row[0]} (deleted)"
    return rows, summaries


def build(ctx: UIContext) -> None:
    """Lay out the "Compare checkpoints" sub-tab (call inside the Inference tab)."""
    settings, runner = ctx.settings, ctx.runner

    def folder_choices() -> Any:
        return gr.update(choices=eval_folders(ctx))

    def opened(current: str | None) -> tuple[Any, Any]:
        """The folders when the tab opens; with none chosen yet, the newest (its change loads the table)."""
        return (gr.update(choices=eval_folders(ctx), value=current or newest_eval_folder(ctx)),
                gr.update(choices=find_files(settings, CORPORA, TRAINING_MANIFESTS)))

    def players(summaries: list[dict[str, Any]], sentence: int | None) -> list[Any]:
        shown = summaries[-MAX_PLAYERS:]
        updates = []
        for i in range(MAX_PLAYERS):
            if i < len(shown) and sentence is not None and sentence < len(shown[i]["audio"]):
                s = shown[i]
                updates.append(gr.update(value=s["audio"][sentence], visible=True,
                                         label=f"{s['checkpoint']} (step {s['step']})"))
            else:
                updates.append(gr.update(value=None, visible=False))
        return updates

    def sentence_choices(summaries: list[dict[str, Any]]) -> list[tuple[str, int]]:
        texts = next((s["sentences"] for s in reversed(summaries) if s["sentences"]), [])
        return [(f"{i + 1}. {text}", i) for i, text in enumerate(texts)]

    @ui_action(outputs=6 + MAX_PLAYERS, message=3)
    def load(folder: str | None):
        rows, summaries = comparison(ctx, folder)
        choices = sentence_choices(summaries)
        first = choices[0][1] if choices else None
        note = (f"{len(summaries)} evaluated checkpoint(s) in `{folder}`" if summaries
                else f"No evaluation in `{folder}` yet: evaluate a checkpoint below, or let a training run evaluate "
                "its checkpoints as it saves them."
                if folder else "")
        checkpoints = [relative(settings, s["path"]) for s in summaries if s["exists"]]
        return (rows, summaries, gr.update(choices=choices, value=first), note,
                gr.update(choices=sorted(set(checkpoints) | set(find_files(settings, CHECKPOINTS)))),
                comparison_figure(summaries), *players(summaries, first))

    @ui_action(outputs=2)
    def evaluate(checkpoint: str, sentences: str, references: str, language: str):
        params = {
            "checkpoint": str(inside_workspace(settings, checkpoint, "checkpoint")),
            "sentences": str(inside_workspace(settings, sentences, "sentences file")),
            "references": (references or "").strip() or ESPEAK, "language": (language or "").strip() or "en",
            "no_wer": True,
        }
        job_id = runner.submit("eval.tts", params)
        for job in follow_job(runner, job_id, poll=0.5):
            yield job_line(job), gr.update()
        require_success(job)
        path = inside_workspace(settings, checkpoint, "checkpoint")
        run = run_folder_of_checkpoint(path)
        run_dir = run.path if run is not None else path.parent
        yield job_line(job), gr.update(value=relative(settings, run_dir))

    with gr.Tab("Compare checkpoints", id="compare") as tab:
        with gr.Row():
            folder = gr.Dropdown(eval_folders(ctx), label="Run or folder (with eval.json)", allow_custom_value=True,
                                 elem_id="cmp-folder", scale=4)
            refresh = gr.Button("Refresh", size="sm", scale=1)
        note = gr.Markdown(elem_id="cmp-note")
        gr.Markdown(METRIC_WORDS, elem_id="cmp-words")
        table = gr.Dataframe(headers=HEADERS, value=[], interactive=False, elem_id="cmp-table")
        chart = plot("cmp-chart", comparison_figure([]))
        summaries = gr.State([])
        sentence = gr.Dropdown([], label="Sentence", elem_id="cmp-sentence")
        audios = [gr.Audio(type="filepath", interactive=False, visible=False, elem_id=f"cmp-audio-{i}")
                  for i in range(MAX_PLAYERS)]
        with gr.Accordion("Evaluate a checkpoint", open=False):
            with gr.Row():
                checkpoint = gr.Dropdown(find_files(settings, CHECKPOINTS), label="Checkpoint",
                                         allow_custom_value=True, elem_id="cmp-checkpoint", scale=3)
                sentences_file = gr.Dropdown(find_files(settings, CORPORA, TRAINING_MANIFESTS), value=None,
                                             allow_custom_value=True, label="Sentences (a text file, one per line, or a "
                                             "manifest)", elem_id="cmp-sentences", scale=3)
                references = gr.Textbox(ESPEAK, label="References (`espeak` or a folder of <n>.wav)", scale=2)
                language = gr.Textbox("en", label="Language", scale=1)
            eval_btn = gr.Button("Evaluate checkpoint", variant="primary", elem_id="cmp-eval-btn")
            eval_status = gr.Markdown(elem_id="cmp-eval-status")

    outputs = [table, summaries, sentence, note, checkpoint, chart, *audios]
    folder.change(load, folder, outputs)
    tab.select(opened, folder, [folder, sentences_file], show_progress="hidden").then(load, folder, outputs)
    refresh.click(folder_choices, None, folder).then(load, folder, outputs)
    sentence.change(players, [summaries, sentence], audios)
    long_action(eval_btn, evaluate, [checkpoint, sentences_file, references, language], [eval_status, folder]) \
        .then(load, folder, outputs)

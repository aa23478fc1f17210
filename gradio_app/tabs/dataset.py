"""Dataset tab: import (paths in the workspace or uploads; Common Voice and Hugging Face folders too, with the
measured filters), the espeak sample, kept and rejected rows, hours per speaker and language, the filter
summary with a duration histogram, players for kept and filtered-out clips, and a codec fitted on a dataset."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterator

import gradio as gr
import plotly.graph_objects as go

from core.confine import check_name_path
from core.data.filters import duration_histogram, with_empty_bins
from core.errors import InputError
from core.fsutil import read_json, read_jsonl
from core.uploads import DATASET, store_upload
from core.workspace_files import (
    DATASETS_DIR, MANIFEST_NAME, TOKENIZERS, dataset_names, find_files, input_folders, manifest_damage,
)
from gradio_app.charts import histogram_figure, plot
from gradio_app.common import (
    UIContext,
    long_action,
    follow_job,
    inside_workspace,
    job_line,
    output_param,
    relative,
    require_success,
    ui_action,
)

FORMATS = ["ljspeech", "folder", "srt", "manifest", "commonvoice", "hf"]
ROWS_SHOWN = 200
LONG_ID = 24  # a speaker or clip id longer than this (a Common Voice client id has 128 characters) is cut short
SHORT_ID = 12  # to this many characters and "…"
LABELS = {"input": "Input folder or file", "output": "Dataset name", "language": "Language", "speaker": "Speaker",
          "per_language": "Clips per language", "languages": "Languages", "codebook_size": "Codebook size",
          "iterations": "k-means iterations"}


def dataset_size(folder: Path) -> tuple[int, float]:
    """Return (clips, hours) of the dataset in `folder`: from its summary.json, else counted in its manifest
    (its readable lines)."""
    summary = read_json(folder / "summary.json") or {}
    if _count(summary.get("kept")) and _number(summary.get("hours")):
        return summary["kept"], float(summary["hours"])
    rows = read_jsonl(folder / "manifest.jsonl")
    seconds = sum(float(r["duration"]) for r in rows if _number(r.get("duration")))
    return len(rows), seconds / 3600.0


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def dataset_choices(ctx: UIContext) -> list[tuple[str, str]]:
    """Return the datasets in the workspace as (label, name) pairs: every folder under datasets/, at any
    depth, that holds a manifest.jsonl (`core.workspace_files.dataset_names`); the label adds clips and hours,
    and what is damaged in a manifest with unreadable lines (`core.workspace_files.manifest_damage`)."""
    choices = []
    for name in dataset_names(ctx.settings):
        folder = ctx.settings.workspace / DATASETS_DIR / name
        clips, hours = dataset_size(folder)
        damage = manifest_damage(folder / MANIFEST_NAME)
        choices.append((f"{name} — {clips} clips, {hours:.3f} h" + (f" (damaged: {damage})" if damage else ""), name))
    return choices


def _listed_dataset(ctx: UIContext, name: str) -> Path:
    """Return the folder of dataset `name` when it is one the Dataset tab lists; raise InputError otherwise."""
    if name not in dataset_names(ctx.settings):
        raise InputError(f"dataset {name!r} is not one of the listed datasets; pick one from the list (Refresh).")
    return inside_workspace(ctx.settings, f"{DATASETS_DIR}/{name}", "dataset")


def store_uploads(ctx: UIContext, files: list[str] | None, name: str) -> Path:
    """Write uploaded files (clips and their table, or a zip of them) into `uploads/<name>/` in the workspace
    (`core.uploads`: names, roots and the size limit enforced) and return the folder to import: the one
    folder a zip held when it held nothing else."""
    store_upload(ctx.settings, DATASET, files or [], name.replace("/", "-"))
    folder = ctx.settings.workspace / DATASET.folder / name.replace("/", "-")
    entries = [p for p in folder.iterdir() if not p.name.startswith(".")]
    return entries[0] if len(entries) == 1 and entries[0].is_dir() else folder


def short(value: Any) -> Any:
    """Return an id longer than LONG_ID characters (a Common Voice client id) cut to SHORT_ID characters and "…"."""
    return f"{value[:SHORT_ID]}…" if isinstance(value, str) and len(value) > LONG_ID else value


def filter_view(summary: dict[str, Any], kept: list[dict[str, Any]] | None = None) -> tuple[str, go.Figure]:
    """Return (filter summary text, duration histogram chart) of a dataset: the histogram its summary.json holds
    (`filters.duration_histogram`, written by a filtered import), else the same bins counted over its kept rows."""
    filters = summary.get("filters")
    durations = [float(r["duration"]) for r in kept or [] if isinstance(r.get("duration"), (int, float))]
    if not isinstance(filters, dict):
        return "", histogram_figure(duration_histogram(durations))
    removed = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in (filters.get("removed") or {}).items()) or "nothing"
    text = (f"Filters removed: {removed}. Silence trimmed in {filters.get('trimmed', 0)} clip(s); digits written out "
            f"as words in {filters.get('digits_verbalised', 0)}.")
    return text, histogram_figure(with_empty_bins(filters.get("duration_histogram") or {}) or duration_histogram(durations))


def dataset_view(ctx: UIContext, name: str | None) -> tuple[Any, ...]:
    """Return (summary, filter summary, histogram, hours table, kept rows, rejected rows, kept clip choices,
    filtered-out clip choices) of dataset `name`."""
    if not name:
        return ("No dataset selected.", "", filter_view({})[1], [], [], [], gr.update(choices=[], value=None),
                gr.update(choices=[], value=None))
    folder = _listed_dataset(ctx, name)
    summary = read_json(folder / "summary.json") or {}
    kept = read_jsonl(folder / "manifest.jsonl")
    rejects = read_jsonl(folder / "rejects.jsonl")
    hours = [["speaker", short(k), v.get("clips"), round(v.get("hours", 0.0), 4)]
             for k, v in (summary.get("per_speaker") or {}).items()]
    hours += [["language", k, v.get("clips"), round(v.get("hours", 0.0), 4)] for k, v in (summary.get("per_language") or {}).items()]
    reasons = ", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in (summary.get("reject_reasons") or {}).items()) or "none"
    text = (f"**{name}**: {len(kept)} kept, {len(rejects)} rejected, {float(summary.get('hours') or 0):.3f} h. "
            f"Reject reasons: {reasons}. Manifest: `{relative(ctx.settings, folder / 'manifest.jsonl')}`")
    kept_rows = [[short(r.get("id")), short(r.get("speaker")), r.get("language"), r.get("duration"), r.get("text")]
                 for r in kept[:ROWS_SHOWN]]
    reject_rows = [[Path(str(r.get("source"))).name, r.get("line"), short(r.get("id")), r.get("reason")]
                   for r in rejects[:ROWS_SHOWN]]
    clips = [r["id"] for r in kept[:ROWS_SHOWN] if r.get("id")]
    removed = [r["id"] for r in rejects if r.get("audio") and r.get("id")][:ROWS_SHOWN]
    filter_text, histogram = filter_view(summary, kept)
    return (text, filter_text, histogram, hours, kept_rows, reject_rows,
            gr.update(choices=clips, value=clips[0] if clips else None),
            gr.update(choices=removed, value=removed[0] if removed else None))


def clip_path(ctx: UIContext, name: str | None, clip_id: str | None) -> str | None:
    """Return the audio file of clip `clip_id` in dataset `name`, checked inside the workspace."""
    if not name or not clip_id:
        return None
    folder = _listed_dataset(ctx, name)
    for row in read_jsonl(folder / "manifest.jsonl"):
        if row.get("id") == clip_id:
            audio = Path(row["audio"])
            return str(inside_workspace(ctx.settings, str(audio if audio.is_absolute() else folder / audio), "clip"))
    raise InputError(f"clip {clip_id!r} is not in dataset {name}.")


def rejected_clip_path(ctx: UIContext, name: str | None, clip_id: str | None) -> str | None:
    """Return the source audio of the filtered-out clip `clip_id` of dataset `name`, checked inside the roots."""
    if not name or not clip_id:
        return None
    folder = _listed_dataset(ctx, name)
    for row in read_jsonl(folder / "rejects.jsonl"):
        if row.get("id") == clip_id and row.get("audio"):
            return str(inside_workspace(ctx.settings, row["audio"], "rejected clip"))
    raise InputError(f"clip {clip_id!r} is not a filtered-out clip of dataset {name}.")


def build(ctx: UIContext, demo: gr.Blocks) -> None:
    """Lay out the Dataset tab."""
    settings, runner = ctx.settings, ctx.runner

    def finish(job_id: str, name: str) -> Iterator[tuple[Any, ...]]:
        for job in follow_job(runner, job_id):
            yield job_line(job), gr.update()
        require_success(job)
        yield job_line(job), gr.update(choices=dataset_choices(ctx), value=name)

    @ui_action(outputs=2, labels=LABELS)
    def import_dataset(fmt: str, source: str, files: list[str] | None, name: str, language: str, speaker: str,
                       tokenizer: str, tsv: str, text_column: str, speaker_column: str, filtered: bool):
        name = check_name_path(name, "Dataset name")
        folder = store_uploads(ctx, files, name) if files else inside_workspace(settings, source, "input")
        params = {"format": fmt, "input": str(folder), "output": output_param(settings, f"datasets/{name}", "output"),
                  "confine_to_roots": True,
                  "language": language.strip() or None, "speaker": speaker.strip() or None,
                  "tokenizer": str(inside_workspace(settings, tokenizer, "tokenizer")) if (tokenizer or "").strip() else None,
                  "tsv": tsv.strip() or None, "text_column": text_column.strip() or None,
                  "speaker_column": speaker_column.strip() or None, "filter": bool(filtered)}
        yield from finish(runner.submit("dataset.import", params), name)

    @ui_action(outputs=2, labels=LABELS)
    def sample(name: str, languages: str, per_language: float):
        name = check_name_path(name, "Dataset name")
        params = {"output": output_param(settings, f"datasets/{name}", "output"), "languages": languages.strip() or None,
                  "per_language": per_language}
        yield from finish(runner.submit("dataset.sample", params), name)

    @ui_action(labels=LABELS)
    def codec(name: str, codebook: float, iterations: float, output: str):
        manifest = _listed_dataset(ctx, name or "") / "manifest.jsonl"
        job_id = runner.submit("codec.train", {"manifest": str(manifest), "output": output_param(settings, output, "codec"),
                                               "codebook_size": codebook, "iterations": iterations})
        for job in follow_job(runner, job_id):
            yield job_line(job)
        require_success(job)
        yield job_line(job) + f" → `{output}`"

    with gr.Tab("Dataset", id="dataset") as tab:
        with gr.Accordion("Import", open=True):
            with gr.Row():
                fmt = gr.Dropdown(FORMATS, value="ljspeech", label="Format", elem_id="ds-format")
                source = gr.Dropdown(input_folders(settings), label="Input folder or file (uploads, or a data root)",
                                     allow_custom_value=True, elem_id="ds-input")
                name = gr.Textbox(label="Dataset name", value="mydata", elem_id="ds-name")
            with gr.Row():
                language = gr.Textbox(label="Language (folder, srt)")
                speaker = gr.Textbox(label="Speaker (optional)")
                tokenizer = gr.Dropdown(find_files(settings, TOKENIZERS), value=None, allow_custom_value=True,
                                        label="Reject text this tokenizer cannot encode (optional)")
            with gr.Row():
                tsv = gr.Textbox(label="Common Voice table", value="validated.tsv", elem_id="ds-tsv")
                text_column = gr.Textbox(label="HF text column", value="text", elem_id="ds-text-column")
                speaker_column = gr.Textbox(label="HF speaker column (optional)", elem_id="ds-speaker-column")
                filtered = gr.Checkbox(True, label="Filter clips (duration, clipping, SNR, silence, text, rate, duplicates)",
                                       elem_id="ds-filter")
            files = gr.File(label="…or upload the clips and their table (or one zip of them); they are kept in the "
                                  "workspace's uploads/<dataset name>/", file_count="multiple", type="filepath",
                            elem_id="ds-upload")
            import_btn = gr.Button("Import", variant="primary", elem_id="ds-import-btn")
            import_status = gr.Markdown(elem_id="ds-import-status")
        with gr.Accordion("espeak-ng sample dataset", open=True):
            with gr.Row():
                sample_name = gr.Textbox(label="Dataset name", value="sample", elem_id="ds-sample-name")
                languages = gr.Textbox(label="Languages", value="en,am", elem_id="ds-sample-langs")
                per_language = gr.Number(24, label="Clips per language", precision=0, elem_id="ds-sample-per")
                sample_btn = gr.Button("Make sample", variant="primary", elem_id="ds-sample-btn")
            status = gr.Markdown(elem_id="ds-status")
        with gr.Row():
            chosen = gr.Dropdown(dataset_choices(ctx), value=None, label="Dataset (clips, hours)",  # None: a pick
                                 allow_custom_value=True, elem_id="ds-select")             # shows its summary
            refresh = gr.Button("Refresh", size="sm")
        view_status = gr.Markdown(elem_id="ds-view-status")
        summary = gr.Markdown(elem_id="ds-summary")
        filter_summary = gr.Markdown(elem_id="ds-filter-summary")
        histogram = plot("ds-histogram", filter_view({})[1])
        hours = gr.Dataframe(headers=["by", "name", "clips", "hours"], value=[], interactive=False)
        with gr.Tab("Kept"):
            kept = gr.Dataframe(headers=["id", "speaker", "language", "seconds", "text"], value=[], interactive=False,
                                wrap=True, column_widths=["12%", "12%", "8%", "8%", "60%"], elem_id="ds-kept")
        with gr.Tab("Rejected"):
            rejected = gr.Dataframe(headers=["source", "line", "id", "reason"], value=[], interactive=False, wrap=True,
                                    elem_id="ds-rejected")
        with gr.Row():
            clip = gr.Dropdown([], label="Clip", elem_id="ds-clip")
            player = gr.Audio(label="Play", type="filepath", interactive=False, elem_id="ds-player")
        with gr.Row():
            removed_clip = gr.Dropdown([], label="Filtered-out clip", elem_id="ds-removed-clip")
            removed_player = gr.Audio(label="Play", type="filepath", interactive=False, elem_id="ds-removed-player")
        with gr.Accordion("Codec for this dataset (TTS training needs one)", open=False):
            with gr.Row():
                codebook = gr.Number(256, label="Codebook size", precision=0)
                iterations = gr.Number(100, label="k-means iterations", precision=0)
                codec_out = gr.Textbox(label="Output", value="codecs/codec.pt", elem_id="ds-codec-out")
                codec_btn = gr.Button("Train codec", elem_id="ds-codec-btn")
            codec_status = gr.Markdown(elem_id="ds-codec-status")

    view_outputs = [summary, filter_summary, histogram, hours, kept, rejected, clip, removed_clip]
    long_action(import_btn, import_dataset, [fmt, source, files, name, language, speaker, tokenizer, tsv, text_column,
                                      speaker_column, filtered], [import_status, chosen])
    long_action(sample_btn, sample, [sample_name, languages, per_language], [status, chosen])
    long_action(codec_btn, codec, [chosen, codebook, iterations, codec_out], codec_status)
    chosen.change(ui_action(outputs=9)(lambda n: ("", *dataset_view(ctx, n))), chosen, [view_status, *view_outputs])
    def refresh_choices() -> Any:
        return gr.update(choices=dataset_choices(ctx))

    def refresh_inputs() -> tuple[Any, ...]:
        return (gr.update(choices=dataset_choices(ctx)), gr.update(choices=input_folders(settings)),
                gr.update(choices=find_files(settings, TOKENIZERS)))

    refresh.click(refresh_choices, None, chosen)
    tab.select(refresh_inputs, None, [chosen, source, tokenizer], show_progress="hidden")
    clip.change(ui_action(outputs=2)(lambda n, c: ("", clip_path(ctx, n, c))), [chosen, clip], [view_status, player])
    removed_clip.change(ui_action(outputs=2)(lambda n, c: ("", rejected_clip_path(ctx, n, c))), [chosen, removed_clip],
                        [view_status, removed_player])
    demo.load(refresh_choices, None, chosen)

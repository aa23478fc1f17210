"""Export tab: prune a training checkpoint to weights and metadata, or export a Chatterbox / IndexTTS2
run in its family's published layout, as a job; the files written are listed for download.

The result panel names the job it shows and is cleared when this page starts another; a Write while a
prune or export job is queued or running (from this page or another) is refused in words; what would fail
in the job — an output that is a file where a folder is written or the reverse, a family without a published
layout — is refused before anything is submitted; a typed output survives switching what to write.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Iterator

import gradio as gr

from core.checkpoint import load_checkpoint
from core.config import Settings, read_yaml
from core.confine import is_inside
from core.errors import InputError
from core.families.base import ModelFamily
from core.families.releases import family_words
from core.families.registry import get_model_family, model_family_names
from core.runs import run_folder_of_checkpoint
from core.workspace_files import CHECKPOINTS, find_files
from gradio_app.common import (
    checkpoint_choices,
    UIContext,
    follow_job,
    inside_workspace,
    job_line,
    kind_words,
    output_param,
    relative,
    require_text,
    ui_action,
)
from gradio_app.runner import job_states
from gradio_app.style import PATH_FIELD

PRUNE = "Prune: weights and metadata (.safetensors), tokenizer and codec beside it"
EXPORT = "Export: the family's published files (Chatterbox t3_*.safetensors, IndexTTS2 gpt_*.pth)"
OUTPUT_HINT = {PRUNE: "checkpoints/exported/model.safetensors", EXPORT: "exports/model"}
KINDS = {PRUNE: "prune", EXPORT: "export"}
PRUNED_SUFFIX = ".safetensors"
OWN_FAMILY = "linguaforge"


def written_files(artifacts: dict[str, Any], roots: list[Path]) -> list[str]:
    """Return the files a prune or export job wrote (its JSON result's `files`, else `output` and the
    copied `assets`) that exist inside `roots`, in the order it reported them."""
    reported = list(artifacts.get("files") or [])
    if not reported:
        reported = [artifacts.get("output"), *(artifacts.get("assets") or {}).values()]
    paths = [Path(str(p)) for p in reported if p]
    return [str(p) for p in dict.fromkeys(paths) if p.is_file() and is_inside(p, roots)]


def checkpoint_family(checkpoint: Path) -> str:
    """Return the model family of a checkpoint: its run's config (a checkpoint in runs/<run>/checkpoints/),
    else its metadata; `linguaforge` when neither names one."""
    run = run_folder_of_checkpoint(checkpoint)
    if run is not None and run.config.is_file():
        try:
            return str(read_yaml(run.config).get("family") or OWN_FAMILY)
        except InputError:
            pass
    return str((load_checkpoint(checkpoint).meta or {}).get("family") or OWN_FAMILY)


def exporting_families() -> list[str]:
    """Return the families with a published layout to export to (those that implement `export`)."""
    return [name for name in model_family_names() if type(get_model_family(name)).export is not ModelFamily.export]


def check_output(settings: Settings, mode: str, checkpoint: Path, output: str | None, replace: bool = False) -> str:
    """Return the output path for writing `checkpoint` as `mode`, resolved inside the roots.

    Raises InputError, before anything is submitted, for an output a prune cannot write (not a
    .safetensors file, an existing folder, or an existing file without `replace`), one an export cannot
    (a name with a file suffix, or an existing file), and a checkpoint whose family has no published
    layout to export to.
    """
    text = require_text(output, "Output: empty. Give where to write, e.g. " + OUTPUT_HINT[mode] + ".")
    path = Path(output_param(settings, text, "Output"))
    if mode == PRUNE:
        if path.suffix != PRUNED_SUFFIX or path.is_dir():
            raise InputError(f"Output {text}: Prune writes one {PRUNED_SUFFIX} file (its tokenizer and codec beside "
                             f"it). Give a file name ending in {PRUNED_SUFFIX}, e.g. {OUTPUT_HINT[PRUNE]}.")
        if path.is_file() and not replace:
            raise InputError(f"Output {text}: the file exists. Tick \"Replace the output file\" to write over it, "
                             "or give another name.")
        return str(path)
    if path.suffix or path.is_file():
        raise InputError(f"Output {text}: Export writes a folder of the family's files, and this names a file. "
                         f"Give a folder, e.g. {OUTPUT_HINT[EXPORT]}.")
    family = checkpoint_family(checkpoint)
    if family not in exporting_families():
        having = [family_words(name) for name in exporting_families()]
        raise InputError(f"{relative(settings, checkpoint)} is a checkpoint of {family_words(family)}, which has no "
                         f"published layout to export to (only {', '.join(having[:-1])} and {having[-1]} have one). "
                         "Choose Prune instead.")
    return str(path)


def build(ctx: UIContext, demo: gr.Blocks) -> None:
    """Lay out the Export tab."""
    settings, runner = ctx.settings, ctx.runner
    submitting = threading.Lock()

    def running_write() -> dict[str, Any] | None:
        return next((job for job in runner.list(50) if job.get("kind") in KINDS.values()
                     and job["status"] in job_states.IN_PROGRESS), None)

    @ui_action(outputs=4)
    def run(checkpoint: str, mode: str, output: str, replace: bool) -> Iterator[tuple[Any, ...]]:
        source = inside_workspace(settings, require_text(checkpoint, "Checkpoint: choose one first."), "Checkpoint")
        params = {"checkpoint": str(source), "output": check_output(settings, mode, source, output, bool(replace))}
        if mode == PRUNE:  # a pruned file replaces an existing one only when asked (`prune --force`)
            params["force"] = bool(replace)
        with submitting:  # a second click (this page or another) never submits a second write
            busy = running_write()
            if busy is not None:
                raise InputError(f"A {kind_words(busy['kind'])} job (job {busy['id']}) was {busy['status']} when you "
                                 "clicked, so this click wrote nothing. Once it ends, its files show on the page that "
                                 "started it and in the Jobs tab.")
            job_id = runner.submit(KINDS[mode], params)
        for job in follow_job(runner, job_id, poll=0.5):  # the panel shows this job and only it
            yield "", job_line(job), None, gr.update(interactive=False)
        if job["status"] != job_states.SUCCEEDED:
            yield "", job_line(job) + " Nothing to download; its log is in the Jobs tab.", None, gr.update(interactive=True)
            return
        files = written_files(job.get("artifacts") or {}, settings.allowed_roots)
        yield ("", f"{job_line(job)} — {len(files)} file(s) written, listed below for download.", files,
               gr.update(interactive=True))

    def keep_typed(chosen: str, current: str) -> Any:
        """Switching what to write suggests that mode's output only over an empty field or the other suggestion."""
        return OUTPUT_HINT[chosen] if not (current or "").strip() or current in OUTPUT_HINT.values() else gr.update()

    with gr.Tab("Export", id="export") as tab:
        gr.Markdown("Prune a training checkpoint for inference, or export a Chatterbox / IndexTTS2 run as the files "
                    "their own code loads. Each runs as a job (Jobs tab); the written files are listed for download.")
        with gr.Row():
            checkpoint = gr.Dropdown(find_files(settings, CHECKPOINTS), label="Checkpoint", allow_custom_value=True,
                                     elem_id="export-checkpoint", elem_classes=[PATH_FIELD], scale=3)
            mode = gr.Radio([PRUNE, EXPORT], value=PRUNE, label="What to write", elem_id="export-mode", scale=3)
            output = gr.Textbox(OUTPUT_HINT[PRUNE], label="Output (a .safetensors file to prune, a folder to export)",
                                elem_id="export-output", scale=2)
        replace = gr.Checkbox(False, label="Replace the output file when it exists (prune)", elem_id="export-force")
        button = gr.Button("Write", variant="primary", elem_id="export-btn")
        message = gr.Markdown(elem_id="export-message")
        status = gr.Markdown(elem_id="export-status")
        files = gr.File(label="Written files", file_count="multiple", interactive=False, elem_id="export-files")

    # concurrency_limit None: a second click runs at once and is refused in words, instead of waiting silently
    button.click(run, [checkpoint, mode, output, replace], [message, status, files, button], concurrency_limit=None)
    mode.input(keep_typed, [mode, output], output, show_progress="hidden")
    mode.change(lambda chosen: gr.update(visible=chosen == PRUNE), mode, replace, show_progress="hidden")  # prune only
    tab.select(lambda current: checkpoint_choices(settings, current), checkpoint, checkpoint, show_progress="hidden")
    demo.load(lambda: checkpoint_choices(settings, None), None, checkpoint)  # opens on the newest, as Inference does

"""Export tab: prune a training checkpoint to weights and metadata, or export a Chatterbox / IndexTTS2
run in its family's published layout, as a job; the files written are listed for download."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import gradio as gr

from core.confine import is_inside
from core.workspace_files import CHECKPOINTS, find_files
from gradio_app.common import UIContext, follow_job, inside_workspace, job_line, output_param, require_success, ui_action

PRUNE = "Prune: weights and metadata (.safetensors), tokenizer and codec beside it"
EXPORT = "Export: the family's published files (Chatterbox t3_*.safetensors, IndexTTS2 gpt_*.pth)"
OUTPUT_HINT = {PRUNE: "checkpoints/exported/model.safetensors", EXPORT: "exports/model"}


def written_files(artifacts: dict[str, Any], roots: list[Path]) -> list[str]:
    """Return the files a prune or export job wrote (its JSON result's `files`, else `output` and the
    copied `assets`) that exist inside `roots`, in the order it reported them."""
    reported = list(artifacts.get("files") or [])
    if not reported:
        reported = [artifacts.get("output"), *(artifacts.get("assets") or {}).values()]
    paths = [Path(str(p)) for p in reported if p]
    return [str(p) for p in dict.fromkeys(paths) if p.is_file() and is_inside(p, roots)]


def build(ctx: UIContext, demo: gr.Blocks) -> None:
    """Lay out the Export tab."""
    settings, runner = ctx.settings, ctx.runner

    @ui_action(outputs=2)
    def run(checkpoint: str, mode: str, output: str, replace: bool) -> Iterator[tuple[Any, Any]]:
        kind = "prune" if mode == PRUNE else "export"
        params = {"checkpoint": str(inside_workspace(settings, checkpoint, "Checkpoint")),
                  "output": output_param(settings, output, "Output")}
        if kind == "prune":  # a pruned file replaces an existing one only when asked (`prune --force`)
            params["force"] = bool(replace)
        job_id = runner.submit(kind, params)
        for job in follow_job(runner, job_id, poll=0.5):
            yield job_line(job), gr.update()
        files = written_files(require_success(job), settings.allowed_roots)
        yield f"{job_line(job)} — {len(files)} file(s) written, listed below for download.", files

    with gr.Tab("Export", id="export") as tab:
        gr.Markdown("Prune a training checkpoint for inference, or export a Chatterbox / IndexTTS2 run as the files "
                    "their own code loads. Each runs as a job (Jobs tab); the written files are listed for download.")
        with gr.Row():
            checkpoint = gr.Dropdown(find_files(settings, CHECKPOINTS), label="Checkpoint", allow_custom_value=True,
                                     elem_id="export-checkpoint", scale=3)
            mode = gr.Radio([PRUNE, EXPORT], value=PRUNE, label="What to write", elem_id="export-mode", scale=3)
            output = gr.Textbox(OUTPUT_HINT[PRUNE], label="Output (.safetensors to prune, a folder to export)",
                                elem_id="export-output", scale=2)
        replace = gr.Checkbox(False, label="Replace the output file when it exists (prune)", elem_id="export-force")
        button = gr.Button("Write", variant="primary", elem_id="export-btn")
        status = gr.Markdown(elem_id="export-status")
        files = gr.File(label="Written files", file_count="multiple", interactive=False, elem_id="export-files")

    button.click(run, [checkpoint, mode, output, replace], [status, files])
    mode.change(lambda chosen: OUTPUT_HINT[chosen], mode, output, show_progress="hidden")
    tab.select(lambda: gr.update(choices=find_files(settings, CHECKPOINTS)), None, checkpoint, show_progress="hidden")

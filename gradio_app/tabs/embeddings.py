"""Embeddings tab: a checkpoint and its base and new tokenizers; detected family and rows before and
after; the init method; `embeddings extend` as a job."""

from __future__ import annotations

from typing import Any

import gradio as gr

from core.checkpoint import inspect_checkpoint
from core.families import get_family, rows_for
from core.tokenizers.tokenizer import load_tokenizer
from core.tokenizers.vocab import INIT_METHODS
from gradio_app.common import (
    UIContext,
    follow_job,
    inside_workspace,
    job_line,
    output_param,
    require_success,
    ui_action,
    workspace_files,
)

CHECKPOINT_GLOBS = ["checkpoints/*.safetensors", "checkpoints/*.pt", "checkpoints/*.pth",
                    "runs/*/checkpoints/*.safetensors", "runs/*/checkpoints/*.pt"]
TOKENIZER_GLOBS = ["tokenizers/*.model", "tokenizers/*.json"]
INITS = list(INIT_METHODS)


def plan_rows(ctx: UIContext, checkpoint: str, base_tokenizer: str, new_tokenizer: str) -> list[list[Any]]:
    """Return the table: family, rows now, tokenizer sizes, rows after extension, rows added."""
    info = inspect_checkpoint(inside_workspace(ctx.settings, checkpoint, "checkpoint"))
    base = load_tokenizer(inside_workspace(ctx.settings, base_tokenizer, "base tokenizer"))
    new = load_tokenizer(inside_workspace(ctx.settings, new_tokenizer, "new tokenizer"))
    rows: list[list[Any]] = [
        ["family", info["family"] or f"unknown: {info['family_error']}"],
        ["rows now", info["rows"]],
        ["embedding dim", info["dim"]],
        ["base tokenizer size", base.size],
        ["new tokenizer size", new.size],
    ]
    if info["family"]:
        after = rows_for(get_family(info["family"]), new.size)
        expected = rows_for(get_family(info["family"]), base.size)
        rows += [["rows after", after], ["rows added", after - (info["rows"] or 0)]]
        if info["rows"] != expected:
            rows.append(["warning", f"the checkpoint has {info['rows']} rows, the base tokenizer needs {expected}"])
    return rows


def build(ctx: UIContext, demo: gr.Blocks) -> None:
    """Lay out the Embeddings tab."""
    settings, runner = ctx.settings, ctx.runner

    @ui_action
    def extend(checkpoint: str, base_tokenizer: str, new_tokenizer: str, init: str, output: str):
        params = {
            "checkpoint": str(inside_workspace(settings, checkpoint, "checkpoint")),
            "base_tokenizer": str(inside_workspace(settings, base_tokenizer, "base tokenizer")),
            "tokenizer": str(inside_workspace(settings, new_tokenizer, "new tokenizer")),
            "init": init,
            "output": output_param(settings, output, "output"),
        }
        job_id = runner.submit("embeddings.extend", params)
        for job in follow_job(runner, job_id):
            yield job_line(job)
        require_success(job)
        yield job_line(job) + f" → `{output}`"

    with gr.Tab("Embeddings", id="embeddings") as tab:
        with gr.Row():
            checkpoint = gr.Dropdown(workspace_files(settings, CHECKPOINT_GLOBS), label="Checkpoint",
                                     allow_custom_value=True, elem_id="emb-checkpoint")
            base_tok = gr.Dropdown(workspace_files(settings, TOKENIZER_GLOBS), label="Base tokenizer",
                                   allow_custom_value=True, elem_id="emb-base")
            new_tok = gr.Dropdown(workspace_files(settings, TOKENIZER_GLOBS), label="New tokenizer",
                                  allow_custom_value=True, elem_id="emb-new")
        check_btn = gr.Button("Check rows", elem_id="emb-check")
        plan = gr.Dataframe(headers=["property", "value"], value=[], interactive=False, elem_id="emb-plan")
        with gr.Row():
            init = gr.Dropdown(INITS, value="fvt", label="Init of new rows")
            output = gr.Textbox(label="Output checkpoint", value="checkpoints/extended.safetensors")
            extend_btn = gr.Button("Extend", variant="primary")
        status = gr.Markdown()

    check_btn.click(ui_action(lambda c, b, n: plan_rows(ctx, c, b, n)), [checkpoint, base_tok, new_tok], plan)
    extend_btn.click(extend, [checkpoint, base_tok, new_tok, init, output], status)

    def refresh() -> tuple[Any, ...]:
        checkpoints = workspace_files(settings, CHECKPOINT_GLOBS)
        tokenizers = workspace_files(settings, TOKENIZER_GLOBS)
        return gr.update(choices=checkpoints), gr.update(choices=tokenizers), gr.update(choices=tokenizers)

    demo.load(refresh, None, [checkpoint, base_tok, new_tok])
    tab.select(refresh, None, [checkpoint, base_tok, new_tok], show_progress="hidden")

"""Embeddings tab: a checkpoint and its base and new tokenizers; detected family and rows before and
after; the init method; `embeddings extend` as a job."""

from __future__ import annotations

from typing import Any

import gradio as gr

from core.checkpoint import load_checkpoint
from core.errors import InputError
from core.families.rows import plan_checkpoint_rows
from core.tokenizers.tokenizer import load_tokenizer
from core.workspace_files import CHECKPOINTS, TOKENIZERS, find_files
from gradio_app.common import (
    init_choices,
    UIContext,
    long_action,
    follow_job,
    inside_workspace,
    job_line,
    output_param,
    require_success,
    ui_action,
)
from gradio_app.style import PATH_FIELD

WILL = "Extend will"
REFUSED = "Extend will refuse"


def plan_rows(ctx: UIContext, checkpoint: str, base_tokenizer: str, new_tokenizer: str) -> list[list[Any]]:
    """Return the table of what Extend will do: family, rows now and after, tokenizer sizes, rows added
    and copied — or, as its last row, the message Extend will refuse with.

    The plan comes from `core.families.rows.plan_checkpoint_rows`, the function `embeddings extend`
    runs (family detected, no truncation, as the Extend button submits it).
    """
    loaded = load_checkpoint(inside_workspace(ctx.settings, checkpoint, "checkpoint"))
    base = load_tokenizer(inside_workspace(ctx.settings, base_tokenizer, "base tokenizer"))
    new = load_tokenizer(inside_workspace(ctx.settings, new_tokenizer, "new tokenizer"))
    rows: list[list[Any]] = [["base tokenizer size", base.size], ["new tokenizer size", new.size]]
    try:
        change = plan_checkpoint_rows(loaded.state_dict, loaded.meta, base, new)
    except InputError as exc:
        return rows + [[REFUSED, str(exc)]]
    return [
        ["family", change.family.name],
        ["rows now", change.rows_before],
        ["embedding dim", int(loaded.state_dict[change.family.embedding_key].shape[-1])],
        *rows,
        ["rows after", change.rows_after],
        ["rows added", change.added],
        ["base rows copied", change.kept],
        [WILL, f"resize {change.rows_before} → {change.rows_after} rows"],
    ]


def build(ctx: UIContext, demo: gr.Blocks) -> None:
    """Lay out the Embeddings tab."""
    settings, runner = ctx.settings, ctx.runner

    @ui_action()
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
            checkpoint = gr.Dropdown(find_files(settings, CHECKPOINTS), label="Checkpoint",
                                     allow_custom_value=True, elem_id="emb-checkpoint", elem_classes=[PATH_FIELD])
            base_tok = gr.Dropdown(find_files(settings, TOKENIZERS), label="Base tokenizer",
                                   allow_custom_value=True, elem_id="emb-base", elem_classes=[PATH_FIELD])
            new_tok = gr.Dropdown(find_files(settings, TOKENIZERS), label="New tokenizer",
                                  allow_custom_value=True, elem_id="emb-new", elem_classes=[PATH_FIELD])
        check_btn = gr.Button("Check rows", elem_id="emb-check")
        check_status = gr.Markdown(elem_id="emb-check-status")
        plan = gr.Dataframe(headers=["property", "value"], value=[], interactive=False, elem_id="emb-plan")
        with gr.Row():
            init = gr.Dropdown(init_choices(), value="fvt", label="Start of the new rows")
            output = gr.Textbox(label="Output checkpoint", value="checkpoints/extended.safetensors")
            extend_btn = gr.Button("Extend", variant="primary", elem_id="emb-extend-btn")
        status = gr.Markdown(elem_id="emb-status")

    check_btn.click(ui_action(outputs=2)(lambda c, b, n: ("", plan_rows(ctx, c, b, n))), [checkpoint, base_tok, new_tok],
                    [check_status, plan])
    long_action(extend_btn, extend, [checkpoint, base_tok, new_tok, init, output], status)

    def refresh() -> tuple[Any, ...]:
        checkpoints = find_files(settings, CHECKPOINTS)
        tokenizers = find_files(settings, TOKENIZERS)
        return gr.update(choices=checkpoints), gr.update(choices=tokenizers), gr.update(choices=tokenizers)

    demo.load(refresh, None, [checkpoint, base_tok, new_tok])
    tab.select(refresh, None, [checkpoint, base_tok, new_tok], show_progress="hidden")

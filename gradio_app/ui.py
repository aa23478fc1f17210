"""The dashboard's Blocks: one tab per stage, each built by its module in `gradio_app.tabs`."""

from __future__ import annotations

import gradio as gr

from gradio_app.common import UIContext
from gradio_app.tabs import (dataset, embeddings, export, finetune, inference, jobs, quality, quickstart, tensorboard, tokenizer,
                             training)

TITLE = "LinguaForge"


def build_ui(ctx: UIContext) -> gr.Blocks:
    """Return the dashboard Blocks for `ctx` (not yet mounted or launched)."""
    with gr.Blocks(title=TITLE) as demo:
        gr.Markdown(
            f"## {TITLE} — teach a pretrained TTS model or GPT LM a new language\n"
            f"Workspace: `{ctx.settings.workspace}`. Paths typed below are relative to it."
        )
        with gr.Tabs():
            for tab in (quickstart, finetune, dataset, tokenizer, embeddings, training, inference, quality, export, jobs,
                        tensorboard):
                tab.build(ctx, demo)
    demo.queue(default_concurrency_limit=4)
    return demo

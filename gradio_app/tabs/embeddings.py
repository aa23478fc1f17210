"""embeddings tab (placeholder while the stage lands)."""

from __future__ import annotations

import gradio as gr

from gradio_app.common import UIContext


def build(ctx: UIContext, demo: gr.Blocks) -> None:
    """Lay out the embeddings tab."""
    with gr.Tab("Embeddings", id="embeddings"):
        gr.Markdown("")

"""dataset tab (placeholder while the stage lands)."""

from __future__ import annotations

import gradio as gr

from gradio_app.common import UIContext


def build(ctx: UIContext, demo: gr.Blocks) -> None:
    """Lay out the dataset tab."""
    with gr.Tab("Dataset", id="dataset"):
        gr.Markdown("")

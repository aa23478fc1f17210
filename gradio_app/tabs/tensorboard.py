"""TensorBoard tab: the TensorBoard that app.py runs, embedded through the same server's proxy route."""

from __future__ import annotations

import html

import gradio as gr

from gradio_app.common import UIContext


def build(ctx: UIContext, demo: gr.Blocks) -> None:
    """Lay out the TensorBoard tab (an iframe on the proxied, login-protected TensorBoard)."""
    src = html.escape(ctx.tensorboard_path, quote=True)
    with gr.Tab("TensorBoard", id="tensorboard"):
        gr.HTML(
            f'<iframe id="tensorboard-frame" src="{src}" title="TensorBoard" loading="lazy"'
            ' style="width:100%;height:820px;border:0"></iframe>'
            f'<p><a href="{src}" target="_blank">Open TensorBoard in its own tab</a></p>'
        )

"""The dashboard's Blocks: one tab per stage, each built by its module in `gradio_app.tabs`."""

from __future__ import annotations

import time

import gradio as gr

from gradio_app.browser import workspace_explorer
from gradio_app.common import UIContext, relative, run_timers_in_view
from gradio_app.tabs import (dataset, embeddings, export, finetune, inference, jobs, quality, quickstart, tensorboard, tokenizer,
                             training)

TITLE = "LinguaForge"
ANNOUNCE_EVERY_S = 3.0


def build_ui(ctx: UIContext) -> gr.Blocks:
    """Return the dashboard Blocks for `ctx` (not yet mounted or launched)."""
    with gr.Blocks(title=TITLE) as demo:
        gr.Markdown(
            f"## {TITLE} — teach a pretrained TTS model or GPT LM a new language\n"
            "Files are picked from the workspace folder (or uploaded into it); paths shown are relative to it.\n\n"
            f"<details><summary>Where the workspace is</summary>\n\n`{ctx.settings.workspace}`\n\n</details>"
        )
        announce = gr.Markdown(elem_id="lf-announce")
        with gr.Accordion("Browse the workspace", open=False):
            browser = workspace_explorer(ctx.settings.allowed_roots, root_dir=ctx.settings.workspace,
                                         ignore_glob="**/.*", file_count="single",
                                         label="Workspace files (a click shows the path to pick or type)",
                                         elem_id="lf-browser")
            picked = gr.Textbox(label="Path, relative to the workspace", interactive=False, buttons=["copy"],
                                elem_id="lf-browser-path")
            browser.change(lambda path: relative(ctx.settings, path) if path else "", browser, picked,
                           show_progress="hidden")
        opened = gr.State(0.0)
        with gr.Tabs() as tabs:
            built = [tab.build(ctx, demo) for tab in (quickstart, finetune, dataset, tokenizer, embeddings, training,
                                                      inference, quality, export, jobs, tensorboard)]
        run_timers_in_view(tabs, [live for live in built if live is not None], opened_on="Quickstart")  # the first tab
        timer = gr.Timer(ANNOUNCE_EVERY_S)

        def announcement(since: float) -> tuple[str, float]:
            """Every open page: the jobs that ended since it opened (at most ANNOUNCE_FOR_S ago)."""
            since = since or time.time()
            return jobs.finished_lines(ctx.runner.list(50), max(since, time.time() - jobs.ANNOUNCE_FOR_S)), since

        demo.load(lambda: ("", time.time()), None, [announce, opened])
        timer.tick(announcement, opened, [announce, opened], show_progress="hidden", queue=False)  # see LiveTimer
    demo.queue(default_concurrency_limit=4)
    return demo

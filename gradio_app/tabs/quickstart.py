"""Quickstart tab (the first one): one button runs the whole TTS (or LM) journey as a `quickstart.*` job.

The job submits every stage as its own job (they show in the Jobs tab) and leaves them to the
dashboard's worker; this tab shows the journey's job, its current stage, and when it is done the
report, the synthesized clips and the report files. A reload shows the newest quickstart job.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr

from core.runs import progress_view
from gradio_app.common import UIContext, follow_job, job_line, ui_action

TTS_PRESETS = ["quick", "full"]
KINDS = ("quickstart.tts", "quickstart.lm")


def stage_line(job: dict[str, Any]) -> str:
    """Return the job's status line with the stage it is in (from its progress record)."""
    view = progress_view(job.get("progress"), job_status=job["status"])
    stage = view.metrics.get("stage")
    where = f" · last finished stage `{stage}` ({view.done}/{view.total})" if stage and job["status"] == "running" else ""
    return job_line(job) + where


def report_view(job: dict[str, Any] | None) -> tuple[Any, Any, Any, Any]:
    """Return (report Markdown, Amharic clip, English clip, report files) for a finished quickstart job."""
    report = (job or {}).get("artifacts") or {}
    paths = report.get("report") or {}
    markdown_path = Path(paths.get("markdown", ""))
    if not paths or not markdown_path.is_file():
        return "", None, None, None
    clips = {clip["language"]: clip["path"] for clip in report.get("audio", []) if Path(clip["path"]).is_file()}
    text = f"Report: `{markdown_path}`\n\n" + markdown_path.read_text(encoding="utf-8")
    return text, clips.get("am"), clips.get("en"), [paths["json"], paths["markdown"]]


def build(ctx: UIContext, demo: gr.Blocks) -> None:
    """Lay out the Quickstart tab."""
    runner = ctx.runner

    def latest() -> dict[str, Any] | None:
        jobs = [job for job in runner.list() if job.get("kind") in KINDS]
        return jobs[0] if jobs else None

    def start(kind: str, params: dict[str, Any]) -> Any:
        job_id = runner.submit(kind, {**params, "external_worker": True})
        for job in follow_job(runner, job_id, poll=2.0):
            yield (stage_line(job), *report_view(job))

    @ui_action
    def run_tts(preset: str):
        yield from start("quickstart.tts", {"preset": preset})

    @ui_action
    def run_lm():
        yield from start("quickstart.lm", {})

    @ui_action
    def show_latest() -> tuple[Any, ...]:
        job = latest()
        if job is None:
            return ("No quickstart has run in this workspace yet.", "", None, None, None)
        return (stage_line(job), *report_view(job))

    with gr.Tab("Quickstart", id="quickstart") as tab:
        gr.Markdown(
            "Run the whole new-language journey on this machine, no model download: the espeak sample, an "
            "English base tokenizer and model, the Amharic tokenizer extension, `fvt` embeddings, a fine-tune "
            "with frozen base rows, pruning, synthesis of held-out sentences and evaluation. `quick` finishes on "
            "a 2-core CPU in under 15 minutes; `full` is for a GPU. Each stage is a job in the Jobs tab."
        )
        with gr.Row():
            preset = gr.Dropdown(TTS_PRESETS, value="quick", label="Preset", elem_id="qs-preset")
            tts_btn = gr.Button("Run TTS quickstart", variant="primary", elem_id="qs-tts")
            lm_btn = gr.Button("Run LM quickstart (vocabulary sizes in bits per byte)", elem_id="qs-lm")
        status = gr.Markdown(elem_id="qs-status")
        with gr.Row():
            am_clip = gr.Audio(label="Amharic (held-out sentence)", type="filepath", interactive=False, elem_id="qs-am")
            en_clip = gr.Audio(label="English (held-out sentence)", type="filepath", interactive=False, elem_id="qs-en")
            files = gr.File(label="report.json / report.md", file_count="multiple", interactive=False, elem_id="qs-files")
        report = gr.Markdown(elem_id="qs-report")

    outputs = [status, report, am_clip, en_clip, files]
    tts_btn.click(run_tts, [preset], outputs)
    lm_btn.click(run_lm, None, outputs)
    demo.load(show_latest, None, outputs)
    tab.select(show_latest, None, outputs, show_progress="hidden")

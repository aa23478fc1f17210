"""Quickstart tab (the first one): one button runs the whole TTS (or LM) journey as a `quickstart.*` job.

The job submits every stage as its own job (they show in the Jobs tab) and leaves them to the
dashboard's worker. Every open page follows the newest quickstart job on its own, from the job
records (a timer, not the page that pressed the button): one progress line (`core.progress.journey_view`:
the overall fraction its stage runner writes — each stage weighed by its measured seconds —, the running
stage in plain words with its own fraction, elapsed time, the ETA and whether it is still a guess), and
when it is done the report, the synthesized clips, the report files and the validation curve.
"""

from __future__ import annotations

import html
import re
import threading
from pathlib import Path
from typing import Any

import gradio as gr

from core.config import Settings
from core.confine import is_inside
from core.errors import InputError
from core.fsutil import read_json
from core.progress import JourneyView, format_seconds, journey_view
from core.workspace_files import quickstart_preset_files
from gradio_app.charts import LOSS_MEASURES, metrics_figure, plot
from gradio_app.common import (
    LiveTimer,
    UIContext,
    inside_workspace,
    job_line,
    relative,
    require_text,
    run_loss_weights,
    ui_action,
)
from gradio_app.runner import job_states
from journeys.quickstart import load_preset

TTS_PRESETS = ["quick", "full"]
VAL_CURVE_TITLE = "Validation loss of the new-language fine-tune"
KINDS = ("quickstart.tts", "quickstart.lm")
FOLLOW_S = 2.0
FILE_ROUTE = "/gradio_api/file="
MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")


def measured_duration(preset: str) -> str:
    """Return how long the built-in TTS preset `preset` takes by its measured stage seconds ("about 4m05s"),
    or "" when its file records none."""
    try:
        seconds = load_preset(preset, "tts").get("stage_seconds") or {}
    except InputError:
        return ""
    return f"about {format_seconds(sum(seconds.values()))}" if seconds else ""


def intro() -> str:
    """Return the tab's opening paragraph, with each built-in preset's measured duration."""
    quick = measured_duration("quick")
    return (
        "Run the whole new-language journey on this machine, no model download: the espeak sample, an English base "
        "tokenizer and model, the Amharic tokenizer extension, the new rows' embeddings, a fine-tune that keeps the "
        "English rows frozen and replays English clips, pruning, synthesis of held-out sentences and their "
        "evaluation, and what English kept (English measured before and after the fine-tune). "
        + (f"`quick` took {quick} on a 2-core CPU with nothing else running, and longer on a busy one (82 minutes "
           "beside other trainings at load 5 to 14); once this machine has run it, its own run sets the pace, and "
           "the progress line says when a run goes slower. " if quick else "")
        + "`full` is for a GPU. Each stage is a job of its own in the Jobs tab.")


def preset_choices(settings: Settings) -> list[str]:
    """Return the TTS quickstart presets: the built-in ones, then the workspace's quickstart/*.yaml (any depth)."""
    return TTS_PRESETS + quickstart_preset_files(settings)


def preset_param(settings: Settings, preset: str | None) -> str:
    """Return the `preset` job parameter for a chosen preset: a built-in name, or a workspace preset's path.

    Raises InputError when nothing is chosen or the choice is not one of `preset_choices` (the loader
    runs only what it lists).
    """
    chosen = require_text(preset, "Choose a preset first.")
    if chosen not in preset_choices(settings):
        raise InputError(f"Preset {chosen!r} is not one of the listed presets; pick one from the list "
                         "(your own go in the workspace's quickstart/ folder).")
    return chosen if chosen in TTS_PRESETS else str(inside_workspace(settings, chosen, "Preset"))


def journey_html(view: JourneyView) -> str:
    """Return the progress box (HTML): a bar filled to the overall fraction (empty at 0%) and the one line."""
    value = f"{view.fraction:.4f}"
    return (
        f'<div class="lf-progress"><div id="qs-progress" role="progressbar" aria-valuemin="0" aria-valuemax="1"'
        f' aria-valuenow="{value}" style="width:100%;height:18px;border:1px solid var(--border-color-primary);'
        f'border-radius:4px;overflow:hidden;background:transparent">'
        f'<div style="width:{view.fraction * 100:.2f}%;height:100%;background:var(--color-accent)"></div></div>'
        f'<div id="qs-progress-text">{html.escape(view.text())}</div></div>'
    )


def served_links(markdown: str, run_dir: Path, settings: Settings) -> str:
    """Return the report Markdown with its relative links (audio, report files) pointing at the app's file
    route, so a click plays or downloads the file instead of a 404; links outside the workspace stay."""

    def link(match: re.Match[str]) -> str:
        target = match.group(1)
        if "://" in target or target.startswith(("/", "#")):
            return match.group(0)
        path = (run_dir / target).resolve()
        if not path.is_file() or not is_inside(path, [settings.workspace]):
            return match.group(0)
        return f"]({FILE_ROUTE}{path})"

    return MARKDOWN_LINK.sub(link, markdown)


def english_kept(report: dict[str, Any]) -> str:
    """Return the box on what English kept through the fine-tune (report.json's `base_language` summary), or ""
    for a report without it (an LM journey, a report written before it)."""
    summary = (report.get("base_language") or {}).get("summary")
    if not summary:
        return ""
    amharic = (report.get("new_language") or {}).get("summary")
    return f"**What English kept.** {html.escape(summary, quote=False)}" + (
        f"\n\n**What Amharic learned.** {html.escape(amharic, quote=False)}" if amharic else "")


def val_curve_figure(report: dict[str, Any]) -> Any:
    """Return the chart of a TTS quickstart report's validation curve (`training.val_curve`), its losses drawn
    as the fine-tune run weighs them (a loss with weight 0 is not trained, so not drawn)."""
    training = report.get("training") or {}
    weights = run_loss_weights(Path(training["finetune_run"])) if training.get("finetune_run") else {}
    return metrics_figure(training.get("val_curve") or [], LOSS_MEASURES, VAL_CURVE_TITLE, weights, default_split="val")


def report_view(job: dict[str, Any] | None, settings: Settings) -> tuple[Any, Any, Any, Any, Any, Any]:
    """Return (report Markdown, Amharic clip, English clip, report files, validation curve chart, what English
    kept) for a finished quickstart job."""
    report = (job or {}).get("artifacts") or {}
    paths = report.get("report") or {}
    markdown_path = Path(paths.get("markdown", ""))
    if not paths or not markdown_path.is_file():
        return "", None, None, None, val_curve_figure({}), ""
    saved = read_json(Path(paths.get("json", ""))) or {}  # the report file, as written, like the Markdown below
    curve = val_curve_figure(saved)
    clips = {clip["language"]: clip["path"] for clip in report.get("audio", []) if Path(clip["path"]).is_file()}
    body = served_links(markdown_path.read_text(encoding="utf-8"), markdown_path.parent, settings)
    text = f"Report: `{relative(settings, markdown_path)}`\n\n" + body
    return text, clips.get("am"), clips.get("en"), [paths["json"], paths["markdown"]], curve, english_kept(saved)


def build(ctx: UIContext, demo: gr.Blocks) -> LiveTimer:
    """Lay out the Quickstart tab; return its live timer."""
    runner, settings = ctx.runner, ctx.settings
    start_lock = threading.Lock()

    def latest() -> dict[str, Any] | None:
        return next((job for job in runner.list() if job.get("kind") in KINDS), None)

    def start(kind: str, params: dict[str, Any]) -> tuple[Any, ...]:
        with start_lock:  # a second click (or page) never starts a second journey
            running = latest()
            if running is not None and running["status"] in job_states.IN_PROGRESS:
                raise InputError(f"A quickstart is already running (job {running['id']}); this page follows it. "
                                 "Cancel it in the Jobs tab to start another.")
            job_id = runner.submit(kind, {**params, "external_worker": True})
        busy = gr.update(interactive=False)
        return f"Started quickstart job `{job_id}`; every open page follows it below.", busy, busy

    @ui_action(outputs=3)
    def run_tts(preset: str) -> tuple[Any, ...]:
        return start("quickstart.tts", {"preset": preset_param(settings, preset)})

    @ui_action(outputs=3)
    def run_lm() -> tuple[Any, ...]:
        return start("quickstart.lm", {})

    def follow(shown: str) -> tuple[Any, ...]:
        """One tick of every open page: the newest quickstart job's state; the report only when it changed."""
        job = latest()
        if job is None:
            idle = gr.update(interactive=True)
            return ("No quickstart has run in this workspace yet.", "", *(gr.update(),) * 6, idle, idle, shown)
        view = journey_view(job)
        buttons = gr.update(interactive=job["status"] not in job_states.IN_PROGRESS)
        key = f"{job['id']}:{job['status'] in job_states.FINAL}"
        report = (gr.update(),) * 6 if key == shown else report_view(job, settings)
        return (job_line(job, with_progress=False), journey_html(view), *report, buttons, buttons, key)

    with gr.Tab("Quickstart", id="quickstart") as tab:
        gr.Markdown(intro(), elem_id="qs-intro")
        with gr.Row():
            preset = gr.Dropdown(preset_choices(settings), value="quick", elem_id="qs-preset",
                                 label="Preset (built-in, or a YAML in the workspace's quickstart/ folder)")
            tts_btn = gr.Button("Run TTS quickstart", variant="primary", elem_id="qs-tts")
            lm_btn = gr.Button("Run LM quickstart: which vocabulary size predicts text best", elem_id="qs-lm")
        message = gr.Markdown(elem_id="qs-message")
        status = gr.Markdown(elem_id="qs-status")
        progress = gr.HTML(elem_id="qs-progress-box")
        with gr.Row():
            am_clip = gr.Audio(label="Amharic (held-out sentence)", type="filepath", interactive=False, elem_id="qs-am")
            en_clip = gr.Audio(label="English (held-out sentence)", type="filepath", interactive=False, elem_id="qs-en")
            files = gr.File(label="report.json / report.md", file_count="multiple", interactive=False, elem_id="qs-files")
        english = gr.Markdown(elem_id="qs-english")
        val_plot = plot("qs-val-plot", val_curve_figure({}))
        report = gr.Markdown(elem_id="qs-report", elem_classes=["lf-report"])
        shown = gr.State("")
        timer = gr.Timer(FOLLOW_S, active=False)  # started after the page's first reading while the tab is in view

    outputs = [status, progress, report, am_clip, en_clip, files, val_plot, english, tts_btn, lm_btn, shown]
    tts_btn.click(run_tts, [preset], [message, tts_btn, lm_btn])
    lm_btn.click(run_lm, None, [message, tts_btn, lm_btn])
    # a tick never overlaps the page's previous one (trigger mode "once"); off the queue it costs the page about half
    timer.tick(follow, shown, outputs, show_progress="hidden", queue=False)
    # the first reading, then the ticks: a slow first reading never lands after a newer tick's (the bar never goes
    # back); run_timers_in_view starts the timer after it while the tab is in view
    first_reading = demo.load(follow, shown, outputs)
    demo.load(lambda: gr.update(choices=preset_choices(settings)), None, preset)
    return LiveTimer(tab, timer, first_reading)

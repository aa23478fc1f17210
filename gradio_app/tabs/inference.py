"""Inference tab: a checkpoint whose tokenizer and codec come from its metadata (shown, not chosen);
Generate speech (`synthesize --stream`; a chatterbox checkpoint speaks through its family with the model
folder given here or in settings) with an optional reference clip — the player starts while the rest is
still being generated (the job's wav grows chunk by chunk, `core.audio_formats.GrowingWavReader`) and the
status gives the time to the first audio and the real-time factor — or text (`generate`) for LM checkpoints;
"Compare checkpoints" (gradio_app/tabs/compare.py) shows their eval.json numbers and clips side by side."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import gradio as gr

from core.audio_formats import GrowingWavReader
from core.checkpoint import load_checkpoint
from core.errors import InputError
from core.inference import resolve_codec, resolve_tokenizer
from core.workspace_files import CHECKPOINTS, find_files
from gradio_app.common import (
    checkpoint_choices,
    UIContext,
    follow_job,
    inside_workspace,
    job_line,
    relative,
    require_success,
    require_text,
    ui_action,
)
from gradio_app.tabs import compare
from gradio_app.style import PATH_FIELD

LABELS = {"text": "Text", "checkpoint": "Checkpoint", "language": "Language", "reference": "Reference clip",
          "temperature": "Temperature", "top_k": "Top-k", "top_p": "Top-p", "seed": "Seed", "prompt": "Prompt",
          "max_new_tokens": "Max new tokens", "speed": "Speed"}
STREAM_POLL_S = 0.2
META_SHOWN = {  # a checkpoint metadata key → what the table calls it
    "task": "task", "family": "model family", "step": "step", "rows": "embedding rows", "base_size": "base vocabulary",
    "tokenizer_size": "tokenizer size", "tokenizer_fingerprint": "tokenizer fingerprint",
    "codec_fingerprint": "codec fingerprint",
}


def checkpoint_meta(ctx: UIContext, checkpoint: str | None) -> list[list[Any]]:
    """Return what inference will use for a checkpoint: its metadata and the tokenizer (and codec, for
    TTS) resolved from the fingerprints it records — shown, never chosen."""
    if not checkpoint:
        return []
    loaded = load_checkpoint(inside_workspace(ctx.settings, checkpoint, "checkpoint"))
    meta = loaded.meta or {}
    if not meta:
        return [["metadata", "none: a foreign checkpoint; extend or train it with LinguaForge first"]]
    rows = [[words, meta.get(key)] for key, words in META_SHOWN.items() if meta.get(key) is not None]
    try:
        rows.append(["tokenizer file", relative(ctx.settings, resolve_tokenizer(loaded, ctx.settings).path)])
    except InputError as exc:
        rows.append(["tokenizer file", f"not found: {exc}"])
    if meta.get("task") == "tts":
        try:
            rows.append(["codec", f"found (fingerprint {resolve_codec(loaded, ctx.settings).fingerprint[:12]}…)"])
        except InputError as exc:
            rows.append(["codec", f"not found: {exc}"])
    return rows


def stream_line(job: dict[str, Any], output: Path, heard: float | None) -> str:
    """Return the status line of a finished streamed synthesis: the job, the file, the time from Generate to the
    first audio heard, the speaker's own time to its first chunk and the real-time factor."""
    report = job.get("artifacts") or {}
    parts = [job_line(job) + f" → `{output}`"]
    if heard is not None:
        parts.append(f"first audio {heard:.2f} s after Generate (the job loads the model first)")
    if report.get("first_audio_s") is not None:
        parts.append(f"first chunk {report['first_audio_s']:.2f} s after speaking began")
    if report.get("rtf") is not None:
        parts.append(f"real-time factor {report['rtf']:.2f} (below 1: faster than it plays)")
    return " · ".join(parts)


def build(ctx: UIContext, demo: gr.Blocks) -> None:
    """Lay out the Inference tab."""
    settings, runner = ctx.settings, ctx.runner
    outputs = settings.workspace / "outputs"

    def run(kind: str, params: dict[str, Any], poll: float = 0.5):
        job_id = runner.submit(kind, params)
        for job in follow_job(runner, job_id, poll=poll):
            yield job
        require_success(job)

    @ui_action(outputs=2, labels=LABELS)
    def synthesize(checkpoint: str, text: str, language: str, reference: str | None, temperature: float,
                   top_k: float, top_p: float, seed: float, model_dir: str, speed: float):
        checkpoint = require_text(checkpoint, "Choose a checkpoint first.")
        text = require_text(text, "Enter the text to speak.")
        out = outputs / f"tts-{time.strftime('%Y%m%d-%H%M%S')}.wav"
        path = inside_workspace(settings, checkpoint, "checkpoint")
        params: dict[str, Any] = {
            "checkpoint": str(path), "text": text,
            "output": str(out), "temperature": temperature, "top_k": top_k, "top_p": top_p, "seed": seed,
            "language": language.strip() or None, "stream": True, "speed": speed,
        }
        family = (load_checkpoint(path).meta or {}).get("family") or "linguaforge"
        if family != "linguaforge":  # a published family speaks through its own code and model folder
            params["family"] = family
            if model_dir.strip():
                params["model_dir"] = model_dir.strip()
        if reference:
            kept = outputs / "references" / Path(reference).name
            kept.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(reference, kept)
            params["reference"] = str(kept)
        reader = GrowingWavReader(out)
        clicked = time.perf_counter()
        heard: float | None = None
        for job in run("synthesize", params, STREAM_POLL_S):
            chunk = reader.read()
            heard = heard if heard is not None or chunk is None else time.perf_counter() - clicked
            yield job_line(job), chunk
        chunk = reader.read()
        heard = heard if heard is not None or chunk is None else time.perf_counter() - clicked
        yield stream_line(job, out.relative_to(settings.workspace), heard), chunk

    @ui_action(outputs=2, labels=LABELS)
    def generate(checkpoint: str, prompt: str, max_tokens: float, temperature: float, top_k: float, seed: float):
        checkpoint_path = inside_workspace(settings, require_text(checkpoint, "Choose a checkpoint first."), "Checkpoint")
        params = {"checkpoint": str(checkpoint_path), "prompt": require_text(prompt, "Enter a prompt to continue."),
                  "max_new_tokens": max_tokens, "temperature": temperature, "top_k": top_k, "seed": seed}
        for job in run("generate", params):
            yield job_line(job), ""
        yield job_line(job), prompt + str((job.get("artifacts") or {}).get("text", ""))

    with gr.Tab("Inference", id="inference") as tab:
        with gr.Row():
            checkpoint = gr.Dropdown(find_files(settings, CHECKPOINTS), label="Checkpoint",
                                     allow_custom_value=True, elem_id="inf-checkpoint", elem_classes=[PATH_FIELD])
            refresh = gr.Button("Refresh", size="sm")
        meta = gr.Dataframe(headers=["from the checkpoint's metadata", "value"], value=[], interactive=False,
                            elem_id="inf-meta")
        meta_status = gr.Markdown(elem_id="inf-meta-status")
        with gr.Row():
            temperature = gr.Slider(0.1, 2.0, value=0.8, step=0.05, label="Temperature")
            top_k = gr.Slider(0, 200, value=50, step=1, label="Top-k (0 = off)")
            top_p = gr.Slider(0.1, 1.0, value=0.95, step=0.01, label="Top-p")
            seed = gr.Number(0, label="Seed", precision=0)
        with gr.Tab("Speech (TTS)"):
            with gr.Row():
                text = gr.Textbox(label="Text", lines=2, scale=4, elem_id="inf-text")
                language = gr.Textbox(label="Language (text normalisation, optional)", placeholder="am", scale=1)
                model_dir = gr.Textbox(label="Published model folder (chatterbox, indextts; default from settings)", scale=2,
                                       elem_id="inf-model-dir")
            with gr.Row():
                reference = gr.Audio(label="Reference clip (optional; IndexTTS2 needs one)", sources=["upload", "microphone"],
                                     type="filepath", scale=4)
                speed = gr.Slider(0.25, 4.0, value=1.0, step=0.05, label="Speed", scale=1, elem_id="inf-speed")
            tts_btn = gr.Button("Generate speech", variant="primary", elem_id="inf-tts-btn")
            status = gr.Markdown(elem_id="inf-status")
            audio = gr.Audio(label="Result (plays while it is generated)", streaming=True, autoplay=True, interactive=False,
                             sources=["microphone"], elem_id="inf-audio", buttons=["download"])
        with gr.Tab("Text (LM)"):
            prompt = gr.Textbox(label="Prompt", lines=2, elem_id="inf-prompt")
            max_tokens = gr.Number(100, label="Max new tokens", precision=0)
            lm_btn = gr.Button("Generate text", variant="primary", elem_id="inf-lm-btn")
            lm_status = gr.Markdown(elem_id="inf-lm-status")
            generated = gr.Textbox(label="Generated text", lines=6, interactive=False, elem_id="inf-generated")
        compare.build(ctx)

    checkpoint.change(ui_action(outputs=2)(lambda c: ("", checkpoint_meta(ctx, c))), checkpoint, [meta_status, meta])
    def refresh_choices(current: str | None) -> Any:
        return checkpoint_choices(settings, current)

    refresh.click(refresh_choices, checkpoint, checkpoint)
    tab.select(refresh_choices, checkpoint, checkpoint, show_progress="hidden")
    tts_btn.click(synthesize, [checkpoint, text, language, reference, temperature, top_k, top_p, seed, model_dir, speed],
                  [status, audio])
    lm_btn.click(generate, [checkpoint, prompt, max_tokens, temperature, top_k, seed], [lm_status, generated])
    demo.load(lambda: refresh_choices(None), None, checkpoint)  # a page opens on the newest checkpoint

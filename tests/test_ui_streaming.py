"""The Inference tab streams: the real app.py in Debian chromium speaks a quickstart-shaped own checkpoint
through a `synthesize --stream` job; the player receives audio while the job still runs, and the status
gives the time to the first audio and the real-time factor. Gradio's streamed player encodes with ffmpeg
(./test.sh installs it), so the test skips without it."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Callable

import pytest
import soundfile as sf

from tests.browser_helpers import chromium_page, running_app

CODES = 200  # 6.4 s at the quickstart codec's 31.25 codes a second


def _wait_for(condition: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s:.0f} s"
        time.sleep(0.3)


@pytest.mark.slow
def test_the_inference_tab_plays_speech_while_it_is_generated(tmp_path: Path) -> None:
    from models.registry import MODEL_SIZES
    from tests.trainer_helpers import stopless_tts_checkpoint

    if shutil.which("ffmpeg") is None:
        pytest.skip("ffmpeg is not installed (Gradio's streamed player needs it; ./test.sh installs it)")
    workspace = tmp_path / "workspace"
    checkpoint = stopless_tts_checkpoint(workspace, CODES, 256, MODEL_SIZES["tiny"], "quick.pt", hop_length=512)
    with running_app(workspace, tmp_path / "app.log") as app, chromium_page(app.url, "Inference") as page:
        field = page.locator("#inf-checkpoint input").first
        field.fill(str(checkpoint.relative_to(workspace)))
        field.press("Enter")
        field.blur()
        page.locator("#inf-text textarea").first.fill("The cat sleeps by the warm fire. We walked home.")
        page.locator("#inf-tts-btn").click()
        status = page.locator("#inf-status")
        _wait_for(lambda: "first audio" in status.inner_text() or "failed" in status.inner_text(), 240)
        shown = status.inner_text()
        assert "succeeded" in shown and "real-time factor" in shown and "first chunk" in shown, shown
        # the player got the stream: Gradio's streamed-audio element holds playable audio
        page.wait_for_function("() => { const a = document.querySelector('#inf-audio audio');"
                               " return a && (a.duration > 1 || (a.buffered && a.buffered.length > 0)); }",
                               timeout=60_000)
    outputs = sorted((workspace / "outputs").glob("tts-*.wav"))
    assert len(outputs) == 1 and not list((workspace / "outputs").glob("*.part"))
    info = sf.info(str(outputs[0]))
    assert info.samplerate == 16000 and info.frames == 2 * (CODES - 1) * 512 + int(0.15 * 16000)

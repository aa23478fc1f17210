"""The guided fine-tune of Chatterbox-Turbo, driven in Debian chromium: the real app.py (worker, jobs) with the
reduced random-initialised Turbo folder (tests/turbo_helpers.py: GPT-2 T3 2 × 256, GPT-2's real tokenizer folder,
full random meanflow S3Gen) inside its workspace, from the folder to a spoken 24 kHz sample played from the
server, each step one click whose result the next step has chosen.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Iterator

import pytest
import soundfile

from core.data.sample_text import AMHARIC_SENTENCES
from tests.browser_helpers import AppProcess, chromium_page, chromium_path, running_app
from tests.data_helpers import make_espeak_dataset
from tests.test_ui_finetune import click_and_wait, field
from tests.turbo_helpers import make_turbo_speech_folder

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(2400)]
playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect
expect.set_options(timeout=60_000)

NAME = "am"
STEPS = 2
MAX_TOKENS = 6      # speech tokens of the sample; generate() adds three silence tokens


@pytest.fixture(scope="module")
def dashboard(module_tmp: Path) -> Iterator[AppProcess]:
    """The real app for a workspace holding the reduced Turbo folder, 4 espeak Amharic clips and an Amharic text."""
    chromium_path()
    workspace = module_tmp / "workspace"
    make_turbo_speech_folder(workspace / "models" / "turbo")
    make_espeak_dataset(workspace / "datasets" / "espeak", per_language=4, languages=("am",))
    (workspace / "corpora").mkdir()
    (workspace / "corpora" / "am.txt").write_text("\n".join(AMHARIC_SENTENCES) + "\n", encoding="utf-8")
    with running_app(workspace, module_tmp / "app.log") as app:
        yield app


def test_guided_turbo_path_from_the_model_folder_to_a_spoken_24_khz_sample(dashboard: AppProcess) -> None:
    with chromium_page(dashboard.url, "Fine-tune a published model") as page:
        page.locator("#ft-family label").filter(has_text="Chatterbox-Turbo").click()
        expect(field(page, "ft-folder")).to_have_value("models/turbo")
        page.locator("#ft-check-btn").click()
        expect(page.locator("#ft-folder-status")).to_contain_text("t3_turbo_v1.safetensors")
        expect(field(page, "ft-base-tokenizer")).to_have_value("models/turbo")       # the AutoTokenizer folder
        expect(field(page, "ft-base-checkpoint")).to_have_value("models/turbo/t3_turbo_v1.safetensors")
        expect(page.locator("#ft-corpus")).to_contain_text("corpora/am.txt")  # the workspace's Amharic text, preselected
        field(page, "ft-pieces").fill("300")
        shown = click_and_wait(page, "ft-tok-btn", "ft-tok-status")
        assert "English: 0 of" in shown
        expect(field(page, "ft-tokenizer")).to_have_value(f"tokenizers/{NAME}/{NAME}.json")
        click_and_wait(page, "ft-grow-btn", "ft-grow-status")
        expect(field(page, "ft-grown")).to_have_value(f"checkpoints/{NAME}/{NAME}_grown.safetensors")
        box = field(page, "ft-manifest")
        box.fill("datasets/espeak/manifest.jsonl")
        box.press("Enter")
        expect(field(page, "ft-voice")).to_have_value(re.compile(r"datasets/espeak/audio/am_\d+\.wav"))
        field(page, "ft-steps").fill(str(STEPS))
        click_and_wait(page, "ft-train-btn", "ft-train-status")
        expect(field(page, "ft-checkpoint")).to_have_value(f"runs/{NAME}/checkpoints/step_{STEPS:07d}.pt")
        field(page, "ft-text").fill(AMHARIC_SENTENCES[1])
        field(page, "ft-max-tokens").fill(str(MAX_TOKENS))
        click_and_wait(page, "ft-speak-btn", "ft-speak-status")
        link = page.locator("#ft-audio a[download]").first
        expect(link).to_have_attribute("href", re.compile(r"/file="))
        response = page.request.get(link.get_attribute("href"))
        assert response.status == 200
        wav, rate = soundfile.read(io.BytesIO(response.body()))
        assert rate == 24000 and 3 * 960 < len(wav) <= (MAX_TOKENS + 3) * 960

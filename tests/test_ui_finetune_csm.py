"""The guided fine-tune of Sesame CSM, driven in Debian chromium: the real app.py (worker, jobs) with the reduced
random-initialised CSM + Mimi folder (tests/csm_helpers.py: the sesame/csm-1b layout, a Llama-3-layout byte-level
BPE tokenizer) inside its workspace, from the folder to a spoken 24 kHz sample played from the server, each step
one click whose result the next step has chosen: the folder's tokenizer merged with Amharic (byte-level BPE
extension, no language tag), `embed_text_tokens` grown, two training steps, a sample in a training clip's voice.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest

from tests.browser_helpers import AppProcess, chromium_page
from tests.csm_helpers import TEXT_ROWS, make_csm_folder
from tests.test_ui_finetune import amharic_dashboard, click_and_wait, field, grown_trained_and_spoken

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(2400)]
playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect
expect.set_options(timeout=60_000)

NAME = "am"
STEPS = 2
MAX_TOKENS = 8      # Mimi frames of the sample (1,920 samples each)


@pytest.fixture(scope="module")
def dashboard(module_tmp: Path) -> Iterator[AppProcess]:
    """The real app for a workspace holding the reduced CSM folder, 4 espeak Amharic and 4 English clips and an Amharic text."""
    with amharic_dashboard(module_tmp, make_csm_folder, "csm") as app:
        yield app


def test_guided_csm_path_from_the_model_folder_to_a_spoken_24_khz_sample(dashboard: AppProcess) -> None:
    workspace = dashboard.workspace
    with chromium_page(dashboard.url, "Fine-tune a published model") as page:
        page.locator("#ft-family label").filter(has_text="Sesame CSM").click()
        expect(field(page, "ft-folder")).to_have_value("models/csm")
        guide = page.locator("#ft-release")
        expect(guide).to_contain_text("Sesame CSM-1B is published as sesame/csm-1b")
        expect(guide).to_contain_text("config.json, model.safetensors, tokenizer.json")
        guide.locator("summary").click()
        expect(guide).to_contain_text("python -m core models pull csm")
        page.locator("#ft-check-btn").click()
        expect(page.locator("#ft-folder-status")).to_contain_text("every published Sesame CSM file")
        expect(field(page, "ft-base-tokenizer")).to_have_value("models/csm")          # the AutoTokenizer folder
        expect(field(page, "ft-base-checkpoint")).to_have_value("models/csm/model.safetensors")
        expect(page.locator("#ft-corpus")).to_contain_text("corpora/am.txt")
        field(page, "ft-pieces").fill("300")
        click_and_wait(page, "ft-tok-btn", "ft-tok-status")
        status = page.locator("#ft-tok-status")   # "… succeeded" shows a moment before the line with the report's words
        expect(status).to_contain_text("English: 0 of")
        expect(status).not_to_contain_text("language tag")
        expect(field(page, "ft-tokenizer")).to_have_value(f"tokenizers/{NAME}/{NAME}.json")
        wav, rate = grown_trained_and_spoken(page, workspace, NAME, STEPS, MAX_TOKENS)
        assert rate == 24000 and 0 < len(wav) <= MAX_TOKENS * 1920 and len(wav) % 1920 == 0
    report = json.loads((workspace / "tokenizers" / NAME / f"{NAME}.report.json").read_text(encoding="utf-8"))
    assert report["base_size"] == TEXT_ROWS < report["new_size"] and report["language_tag"] is None

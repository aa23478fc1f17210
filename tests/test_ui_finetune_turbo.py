"""The guided fine-tune of Chatterbox-Turbo, driven in Debian chromium: the real app.py (worker, jobs) with the
reduced random-initialised Turbo folder (tests/turbo_helpers.py: GPT-2 T3 2 × 256, GPT-2's real tokenizer folder,
full random meanflow S3Gen) inside its workspace, from the folder to a spoken 24 kHz sample played from the
server, each step one click whose result the next step has chosen.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from tests.browser_helpers import AppProcess, chromium_page, internal_words, open_tab
from tests.test_ui_finetune import amharic_dashboard, click_and_wait, field, grown_trained_and_spoken
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
    """The real app for a workspace holding the reduced Turbo folder, 4 espeak Amharic and 4 English clips and an Amharic text."""
    with amharic_dashboard(module_tmp, make_turbo_speech_folder, "turbo") as app:
        yield app


PAGES = [("Fine-tune a published model",), ("Dataset",), ("Tokenizer", "Extend"), ("Training",), ("Export",),
         ("Jobs",)]


def test_without_a_folder_the_tab_names_the_release_its_files_and_how_to_get_them(dashboard: AppProcess) -> None:
    """This workspace holds a Turbo folder only: for Chatterbox and IndexTTS2, before any click, step 1 names the
    published release, its files and where they go, with the command that fetches them folded away; no page shows
    an internal word (tests/browser_helpers.py INTERNAL_WORDS: snake_case keys, backticks, dicts, paths, flags)."""
    with chromium_page(dashboard.url, "Fine-tune a published model") as page:
        guide = page.locator("#ft-release")
        expect(guide).to_contain_text("No Chatterbox model folder in the workspace yet.")
        expect(guide).to_contain_text("Chatterbox multilingual v3 is published as ResembleAI/chatterbox")
        expect(guide).to_contain_text("ve.pt, t3_mtl23ls_v3.safetensors, s3gen.pt, grapheme_mtl_merged_expanded_v1.json")
        expect(guide).to_contain_text("Pull fetches them from the Hub into models/chatterbox-v3")
        assert "python -m core" not in guide.inner_text()  # folded: a command line is for those who look for it
        guide.locator("summary").click()
        expect(guide).to_contain_text("python -m core models pull chatterbox:v3")
        page.locator("#ft-family label").filter(has_text="IndexTTS2").click()
        expect(guide).to_contain_text("No IndexTTS2 model folder in the workspace yet.")
        expect(guide).to_contain_text("IndexTTS2 is published as IndexTeam/IndexTTS-2")
        expect(guide).to_contain_text("config.yaml, gpt.pth, bpe.model, wav2vec2bert_stats.pt")
        page.locator("#ft-family label").filter(has_text="Chatterbox-Turbo").click()
        expect(field(page, "ft-folder")).to_have_value("models/turbo")
        expect(guide).to_contain_text("ResembleAI/chatterbox-turbo")
        expect(guide).not_to_contain_text("No Chatterbox-Turbo model folder")
        found = {}
        for visit in PAGES:
            open_tab(page, visit[0])
            for sub in visit[1:]:
                page.get_by_role("tab", name=sub, exact=True).click()
            page.wait_for_timeout(1500)  # the tab's own refresh lands
            shown = internal_words(page.locator(".gradio-container").first.inner_text())
            if shown:
                found[" / ".join(visit)] = shown
        assert not found, found
        open_tab(page, "Export")
        expect(page.locator("#export-force")).to_be_visible()  # Prune's "replace the file"…
        page.locator("#export-mode label").filter(has_text="Export").click()
        expect(page.locator("#export-force")).to_be_hidden()  # … has no meaning for an export's folder


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
        wav, rate = grown_trained_and_spoken(page, dashboard.workspace, NAME, STEPS, MAX_TOKENS)
        assert rate == 24000 and 3 * 960 < len(wav) <= (MAX_TOKENS + 3) * 960

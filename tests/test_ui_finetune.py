"""The guided fine-tune of a published model, driven in Debian chromium: the real app.py (worker, jobs)
with the reduced random-initialised published Chatterbox folder (tests/chatterbox_helpers.py: one-layer
T3, full random S3Gen) inside its workspace, from the folder to a spoken 24 kHz sample, each step one
click whose result the next step has chosen, the training keeping English by default (the workspace's
English clips replayed in every batch); then the trained run exported from the Export tab (which opens on
it), its `t3_*.safetensors` loading strictly into the published `T3` of the reduced config.
"""

from __future__ import annotations

import io
import json
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import soundfile
import yaml

from core.data.sample_text import AMHARIC_SENTENCES
from tests.browser_helpers import AppProcess, chromium_page, chromium_path, open_tab, running_app
from tests.chatterbox_helpers import REDUCED, make_chatterbox_speech_folder
from tests.data_helpers import make_espeak_dataset

pytestmark = [pytest.mark.browser, pytest.mark.slow]
playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect
expect.set_options(timeout=60_000)  # a slow shared machine: generous waits, never fixed sleeps

TAB = "Fine-tune a published model"
NAME = "am"
STEPS = 2
MAX_TOKENS = 6  # speech tokens of the sample: (6 − 1) × 960 samples at most
TRAINED = f"runs/{NAME}/checkpoints/step_{STEPS:07d}.pt"
JOB_MS = 600_000


@contextmanager
def amharic_dashboard(module_tmp: Path, make_folder: Callable[[Path], Any], folder: str) -> Iterator[AppProcess]:
    """Run the real app for a workspace holding `models/<folder>` (made by `make_folder`), 4 espeak Amharic clips,
    4 English ones (datasets/en: the base language's, kept by replay) and an Amharic text (`corpora/am.txt`)."""
    chromium_path()
    workspace = module_tmp / "workspace"
    make_folder(workspace / "models" / folder)
    make_espeak_dataset(workspace / "datasets" / "espeak", per_language=4, languages=("am",))
    make_espeak_dataset(workspace / "datasets" / "en", per_language=4, languages=("en",))
    (workspace / "corpora").mkdir()
    (workspace / "corpora" / "am.txt").write_text("\n".join(AMHARIC_SENTENCES) + "\n", encoding="utf-8")
    with running_app(workspace, module_tmp / "app.log") as app:
        yield app


@pytest.fixture(scope="module")
def dashboard(module_tmp: Path) -> Iterator[AppProcess]:
    """The real app for a workspace holding the reduced Chatterbox folder, 4 espeak Amharic clips and an Amharic text."""
    with amharic_dashboard(module_tmp, lambda dest: make_chatterbox_speech_folder(dest, copy=True), "chatterbox") as app:
        yield app


@pytest.fixture(scope="module")
def page(dashboard: AppProcess):
    """A chromium page on the dashboard, the guided tab open."""
    with chromium_page(dashboard.url, TAB) as opened:
        yield opened


def field(page, elem_id: str):
    """Return the text input of the component `elem_id`."""
    return page.locator(f"#{elem_id} input, #{elem_id} textarea").first


def click_and_wait(page, button: str, status: str, timeout_ms: int = JOB_MS) -> str:
    """Click `button` and return the text of `status` once its job succeeded; fail with what it shows instead."""
    page.locator(f"#{button}").click()
    expect(page.locator(f"#{status}")).to_contain_text(re.compile(r"succeeded|failed|Error"), timeout=timeout_ms)
    shown = page.locator(f"#{status}").inner_text()
    assert "succeeded" in shown, shown
    return shown


def grown_trained_and_spoken(page, workspace: Path, name: str, steps: int, max_tokens: int) -> tuple[Any, int]:
    """Steps 3 to 5 of the guided path once step 2 chose the tokenizer: grow the rows, train `steps` steps on the
    workspace's espeak manifest (its first clip becomes the sample's voice) with English kept by default (its
    clips replayed in every batch), speak an Amharic sentence of at most `max_tokens` speech tokens; return
    (samples, rate) of the sample the page plays, fetched from the server."""
    # 3. the grown embeddings, chosen for step 4
    click_and_wait(page, "ft-grow-btn", "ft-grow-status")
    expect(field(page, "ft-grown")).to_have_value(f"checkpoints/{name}/{name}_grown.safetensors")
    # 4. training on the workspace's manifest; its first clip becomes the sample's voice; English kept by default
    expect(field(page, "ft-keep")).to_have_value("datasets/en/manifest.jsonl")
    expect(page.locator("#ft-keep-note")).to_contain_text(
        "25% of each training batch comes from the clips of datasets/en/manifest.jsonl, so the model keeps")
    box = field(page, "ft-manifest")
    box.fill("datasets/espeak/manifest.jsonl")
    box.press("Enter")
    expect(field(page, "ft-voice")).to_have_value(re.compile(r"datasets/espeak/audio/am_\d+\.wav"))
    field(page, "ft-steps").fill(str(steps))
    click_and_wait(page, "ft-train-btn", "ft-train-status")
    expect(field(page, "ft-checkpoint")).to_have_value(f"runs/{name}/checkpoints/step_{steps:07d}.pt")
    config = yaml.safe_load((workspace / "runs" / name / "config.yaml").read_text(encoding="utf-8"))
    assert config["data"]["replay"] == {"manifest": "datasets/en/manifest.jsonl", "share": 0.25}
    status = json.loads((workspace / "runs" / name / "status.json").read_text(encoding="utf-8"))
    assert (status["replay"]["per_batch"], status["replay"]["of_batch"]) == (1, 4)  # one English clip in each batch
    # 5. a spoken sample, played from the server
    field(page, "ft-text").fill(AMHARIC_SENTENCES[1])
    field(page, "ft-max-tokens").fill(str(max_tokens))
    click_and_wait(page, "ft-speak-btn", "ft-speak-status")
    link = page.locator("#ft-audio a[download]").first
    expect(link).to_have_attribute("href", re.compile(r"/file="))
    response = page.request.get(link.get_attribute("href"))
    assert response.status == 200
    return soundfile.read(io.BytesIO(response.body()))


def test_guided_path_from_the_model_folder_to_a_spoken_24_khz_sample(dashboard: AppProcess, page) -> None:
    # 1. the folder is listed (found in the workspace) and chosen; its check names the published files
    expect(field(page, "ft-folder")).to_have_value("models/chatterbox")
    page.locator("#ft-check-btn").click()
    expect(page.locator("#ft-folder-status")).to_contain_text("every published Chatterbox file")
    expect(field(page, "ft-base-tokenizer")).to_have_value("models/chatterbox/grapheme_mtl_merged_expanded_v1.json")
    expect(field(page, "ft-base-checkpoint")).to_have_value("models/chatterbox/t3_mtl23ls_v2.safetensors")
    # 2. the tokenizer, from the Amharic text the workspace holds (preselected), chosen for step 3
    expect(page.locator("#ft-corpus")).to_contain_text("corpora/am.txt")
    field(page, "ft-pieces").fill("200")
    shown = click_and_wait(page, "ft-tok-btn", "ft-tok-status")
    expect(field(page, "ft-tokenizer")).to_have_value(f"tokenizers/{NAME}/{NAME}.json")
    drift = json.loads((dashboard.workspace / "tokenizers" / NAME / f"{NAME}.report.json").read_text(encoding="utf-8"))["base_drift"]
    assert drift["protected"]["language"] == "en" and drift["lines_checked"] > 10_000 and drift["lines_changed"] == 0
    assert f"English: 0 of {drift['lines_checked']:,} protected lines encode differently." in shown
    assert "new ones of the 200 asked" in shown, shown  # why the grown model gets the rows it gets
    wav, rate = grown_trained_and_spoken(page, dashboard.workspace, NAME, STEPS, MAX_TOKENS)
    assert rate == 24000 and 0 < len(wav) <= (MAX_TOKENS - 1) * 960


def test_the_trained_run_exported_from_the_export_tab_loads_strictly_into_the_published_t3(dashboard: AppProcess, page) -> None:
    from chatterbox.models.t3 import T3
    from safetensors.torch import load

    from core.families.chatterbox.t3 import ChatterboxConfig, t3_hparams

    if not (dashboard.workspace / TRAINED).is_file():
        pytest.skip("the guided run did not train (see the test before)")
    open_tab(page, "Export")
    box = field(page, "export-checkpoint")
    expect(box).to_have_value(re.compile(rf"runs/{NAME}/checkpoints/(?:step_{STEPS:07d}|best)\.pt"))  # the newest
    box.fill(TRAINED)
    box.press("Enter")
    page.locator("#export-mode label").filter(has_text="Export:").click()
    expect(field(page, "export-output")).to_have_value("exports/model")  # the mode's hint, put in by the page
    field(page, "export-output").fill(f"exports/{NAME}")
    page.locator("#export-btn").click()
    expect(page.locator("#export-status")).to_contain_text("file(s) written", timeout=JOB_MS)
    links = page.eval_on_selector_all("#export-files a", "els => els.map(e => e.href)")
    t3_link = next(href for href in links if re.search(r"/t3_[^/?]*\.safetensors", href))
    response = page.request.get(t3_link)
    assert response.status == 200
    state = load(response.body())
    rows = int(state["text_emb.weight"].shape[0])
    assert rows > 2454  # the Amharic rows grown in step 3
    T3(t3_hparams(ChatterboxConfig(text_tokens_dict_size=rows, **REDUCED))).load_state_dict(state, strict=True)

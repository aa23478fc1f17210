"""The Dataset tab in a real browser: a Common Voice release with planted faults and a Hugging Face folder
imported from the workspace with the filters on; the filter summary, histogram and both players."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from tests.browser_helpers import AppProcess, chromium_page, chromium_path, running_app
from tests.cv_helpers import make_hf_folder, make_release, plant_faults
from tests.test_ui_dashboard import fill, wait_text

pytestmark = [pytest.mark.browser, pytest.mark.slow]
pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def dashboard(module_tmp: Path) -> Iterator[AppProcess]:
    """The real app for a workspace holding a faulty Common Voice release and an HF folder of its good clips."""
    chromium_path()
    workspace = module_tmp / "workspace"
    release = make_release(workspace / "inputs" / "cv", per_language=6)
    make_hf_folder(release, workspace / "inputs" / "hf")
    plant_faults(release)
    with running_app(workspace, module_tmp / "app.log") as app:
        yield app


@pytest.fixture(scope="module")
def page(dashboard: AppProcess):
    """A chromium page on the Dataset tab."""
    with chromium_page(dashboard.url, "Dataset", height=1200) as tab:
        tab.locator("#ds-import-btn").wait_for()
        yield tab


def test_commonvoice_import_shows_the_filter_summary_histogram_and_plays_kept_and_removed_clips(page, dashboard) -> None:
    fill(page, "ds-format", "commonvoice", commit=True)
    fill(page, "ds-input", "inputs/cv")
    fill(page, "ds-name", "cv")
    page.locator("#ds-import-btn").click()
    wait_text(page, "ds-import-status", "succeeded", 180)
    shown = wait_text(page, "ds-summary", "7 kept, 8 rejected", 30)
    assert "filter clipping: 1" in shown, shown
    shown = wait_text(page, "ds-filter-summary", "Filters removed", 30)
    for words in ("clipping 1", "snr 1", "speech_rate 1", "duplicate 2", "Silence trimmed in 1 clip"):
        assert words in shown, shown
    page.locator("#ds-histogram canvas, #ds-histogram svg").first.wait_for(state="attached")
    page.locator("#ds-player audio, #ds-player button").first.wait_for(state="attached")
    fill(page, "ds-removed-clip", "planted_noisy", commit=True)
    page.locator("#ds-removed-player audio, #ds-removed-player button").first.wait_for(state="attached")
    assert "error" not in page.locator("#ds-view-status").inner_text().lower()


def test_hf_import_from_the_workspace_keeps_the_same_clean_clips(page, dashboard) -> None:
    fill(page, "ds-format", "hf", commit=True)
    fill(page, "ds-input", "inputs/hf")
    fill(page, "ds-name", "hf")
    fill(page, "ds-text-column", "sentence")
    fill(page, "ds-speaker-column", "client_id")
    page.locator("#ds-import-btn").click()
    wait_text(page, "ds-import-status", "succeeded", 180)
    wait_text(page, "ds-summary", "6 kept, 0 rejected", 30)
    wait_text(page, "ds-filter-summary", "duplicate 0", 30)

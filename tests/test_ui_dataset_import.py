"""The Dataset tab in a real browser: a Common Voice release with planted faults and a Hugging Face folder
imported from the workspace with the filters on; the filter summary, the duration histogram (its bars read
from the figure Plotly drew, against summary.json), the kept table and both players."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterator

import pytest

from tests.browser_helpers import AppProcess, choose, chromium_page, chromium_path, running_app
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


HISTOGRAM = """() => {
  const gd = document.querySelector('#ds-histogram .js-plotly-plot');
  if (!gd || !gd.data || !gd.data.length || !Array.from(gd.data[0].x || []).length) return null;
  const heights = [...gd.querySelectorAll('g.trace.bars g.point path')].map(p => p.getBoundingClientRect().height);
  return {x: Array.from(gd.data[0].x), y: Array.from(gd.data[0].y), heights};
}"""


def test_commonvoice_import_shows_the_filter_summary_histogram_and_plays_kept_and_removed_clips(page, dashboard) -> None:
    choose(page, "ds-format", "commonvoice")
    fill(page, "ds-input", "inputs/cv", commit=True)
    fill(page, "ds-name", "cv")
    page.locator("#ds-import-btn").click()
    wait_text(page, "ds-import-status", "succeeded", 180)
    shown = wait_text(page, "ds-summary", "7 kept, 8 rejected", 30)
    assert "filter clipping: 1" in shown, shown
    shown = wait_text(page, "ds-filter-summary", "Filters removed", 30)
    for words in ("clipping 1", "snr 1", "speech rate 1", "duplicate 2", "Silence trimmed in 1 clip"):
        assert words in shown, shown
    summary = json.loads((dashboard.workspace / "datasets" / "cv" / "summary.json").read_text())
    bins = summary["filters"]["duration_histogram"]
    page.wait_for_function(f"() => ({HISTOGRAM})() !== null")
    drawn = page.evaluate(f"({HISTOGRAM})()")
    assert drawn["x"] == [f"{span} s" for span in bins] and drawn["y"] == list(bins.values()), (drawn, bins)
    tallest = max(drawn["heights"])  # each bar drawn as tall as its count
    assert [round(h / tallest * max(drawn["y"]), 1) for h in drawn["heights"]] == pytest.approx(drawn["y"], abs=0.1)
    kept = page.locator("#ds-kept").inner_text()
    assert not re.search(r"[0-9a-f]{40,}", kept), kept  # a client id is cut short, the Amharic text stays in view
    page.locator("#ds-player audio, #ds-player button").first.wait_for(state="attached")
    fill(page, "ds-removed-clip", "planted_noisy", commit=True)
    page.locator("#ds-removed-player audio, #ds-removed-player button").first.wait_for(state="attached")
    assert "error" not in page.locator("#ds-view-status").inner_text().lower()


def test_hf_import_from_the_workspace_keeps_the_same_clean_clips(page, dashboard) -> None:
    choose(page, "ds-format", "hf")
    fill(page, "ds-input", "inputs/hf", commit=True)
    fill(page, "ds-name", "hf")
    fill(page, "ds-text-column", "sentence")
    fill(page, "ds-speaker-column", "client_id")
    page.locator("#ds-import-btn").click()
    wait_text(page, "ds-import-status", "succeeded", 180)
    wait_text(page, "ds-summary", "6 kept, 0 rejected", 30)
    wait_text(page, "ds-filter-summary", "duplicate 0", 30)

"""Every tick of a dashboard timer is an event each open page pays for (Gradio updates the loading status of every
component on each one: about a third of a CPU-second in chromium on the 2-core test machine), so a page ticks only
for what is in view: the tab a person looks at keeps its live parts current, every other tab's timer stops, and the
page-wide announcement of finished jobs goes on. Before, a tab once opened kept ticking for good: a page that had
looked at Training and Jobs sent 15 events in 12 s on the Dataset tab, against 4 now.

The real app.py in Debian chromium; the events are the queue requests the page sends, mapped to their timer
through the app's own /config."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from tests.browser_helpers import AppProcess, chromium_page, chromium_path, open_tab, running_app

pytestmark = [pytest.mark.browser, pytest.mark.slow]
playwright_api = pytest.importorskip("playwright.sync_api")

WINDOW_MS = 6_500  # two periods of the slowest timer (3 s)
SETTLE_S = 90.0  # the ceiling for a switch to reach the server and its timers to start and stop, on a loaded machine


@pytest.fixture(scope="module")
def dashboard(module_tmp: Path) -> Iterator[AppProcess]:
    """The real app for an empty workspace."""
    chromium_path()
    workspace = module_tmp / "workspace"
    workspace.mkdir()
    with running_app(workspace, module_tmp / "app.log") as app:
        yield app


def tick_functions(url: str) -> set[int]:
    """The ids of the app's event functions triggered by a timer's tick (from the app's /config)."""
    config = httpx.get(url + "/config", timeout=30.0).json()
    return {dep["id"] for dep in config["dependencies"] if any(event == "tick" for _, event in dep["targets"])}


def ticks_in_view(page, ticks: set[int], tabs: tuple[str, ...], expected: dict[str, int]) -> dict[str, set[int]]:
    """Click each of `tabs` in turn and return the tick functions the page sent in a window of WINDOW_MS once the
    switch took effect: the first window that holds `expected[tab]` of them, else the last one before SETTLE_S."""
    sent: list[int] = []

    def record(request) -> None:
        if request.method == "POST" and "json" in request.headers.get("content-type", ""):  # queued or not
            fn = json.loads(request.post_data or "{}").get("fn_index")
            if fn in ticks:
                sent.append(fn)

    page.on("request", record)
    seen: dict[str, set[int]] = {}
    for tab in tabs:
        open_tab(page, tab)
        deadline = time.monotonic() + SETTLE_S
        while True:
            sent.clear()
            page.wait_for_timeout(WINDOW_MS)
            seen[tab] = set(sent)
            if len(seen[tab]) == expected[tab] or time.monotonic() > deadline:
                break
    return seen


def assert_each_tab_ticks_its_own(seen: dict[str, set[int]]) -> None:
    """Dataset: only the page-wide announcement; every other tab: the announcement and its own timer, each its own."""
    assert len(seen["Dataset"]) == 1, seen
    [announcement] = seen["Dataset"]  # a tab without live parts: only the page-wide announcement ticks
    own = {tab: fns - {announcement} for tab, fns in seen.items()}
    assert all(announcement in fns for fns in seen.values()), seen
    # the tab's own timer, one handler per tick; Quickstart's again when it is back in view
    assert all(len(fns) == 1 for tab, fns in own.items() if tab != "Dataset"), seen
    assert len(own["Quickstart"] | own["Training"] | own["Jobs"]) == 3, seen  # each its own


EXPECTED = {"Training": 2, "Jobs": 2, "Dataset": 1, "Quickstart": 2}


def test_a_page_ticks_only_for_the_tab_in_view_and_the_announcement(dashboard: AppProcess) -> None:
    ticks = tick_functions(dashboard.url)
    assert len(ticks) == 4, ticks  # the announcement, Quickstart, Training and Jobs: one event per tick each
    with chromium_page(dashboard.url, "Quickstart") as page:
        page.locator("#qs-status").filter(has_text="No quickstart").wait_for()  # the first reading, then the ticks
        seen = ticks_in_view(page, ticks, ("Training", "Jobs", "Dataset", "Quickstart"), EXPECTED)
    assert_each_tab_ticks_its_own(seen)


def test_a_tab_left_before_the_pages_first_reading_does_not_tick_behind_the_next(dashboard: AppProcess) -> None:
    """The Quickstart timer starts after the page's first reading: a person who switches to Dataset before that
    reading landed leaves it stopped (it starts only if Quickstart is still in view), and it ticks again once
    Quickstart is back."""
    ticks = tick_functions(dashboard.url)
    with chromium_page(dashboard.url, "Dataset") as page:  # clicked as soon as the tabs are drawn
        seen = ticks_in_view(page, ticks, ("Dataset", "Training", "Quickstart"), EXPECTED)
        page.locator("#qs-status").filter(has_text="No quickstart").wait_for()  # the first reading did land
    assert len(seen["Dataset"]) == 1 and seen["Dataset"] < seen["Training"], seen
    assert len(seen["Quickstart"] - seen["Dataset"]) == 1 and seen["Quickstart"] != seen["Training"], seen

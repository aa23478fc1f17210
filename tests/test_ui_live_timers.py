"""Every tick of a dashboard timer is an event each open page pays for (Gradio updates the loading status of every
component on each one: about a third of a CPU-second in chromium on the 2-core test machine), so a page ticks only
for what is in view: the tab a person looks at keeps its live parts current, every other tab's timer stops, and the
page-wide announcement of finished jobs goes on. Before, a tab once opened kept ticking for good: a page that had
looked at Training and Jobs sent 15 events in 12 s on the Dataset tab, against 4 now.

The real app.py in Debian chromium; the events are the queue requests the page sends, mapped to their timer
through the app's own /config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from tests.browser_helpers import AppProcess, chromium_page, chromium_path, running_app

pytestmark = [pytest.mark.browser, pytest.mark.slow]
playwright_api = pytest.importorskip("playwright.sync_api")

SETTLE_MS = 3_000  # the switch reached the server and its timers were started and stopped
WINDOW_MS = 6_500  # two periods of the slowest timer (3 s)


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


def test_a_page_ticks_only_for_the_tab_in_view_and_the_announcement(dashboard: AppProcess) -> None:
    ticks = tick_functions(dashboard.url)
    assert len(ticks) == 4, ticks  # the announcement, Quickstart, Training and Jobs: one event per tick each
    with chromium_page(dashboard.url, "Quickstart") as page:
        sent: list[int] = []

        def record(request) -> None:
            if request.method == "POST" and "json" in request.headers.get("content-type", ""):  # queued or not
                fn = json.loads(request.post_data or "{}").get("fn_index")
                if fn in ticks:
                    sent.append(fn)

        page.on("request", record)
        page.locator("#qs-status").filter(has_text="No quickstart").wait_for()  # the first reading, then the ticks

        def ticking_in(tab: str) -> set[int]:
            page.get_by_role("tab", name=tab, exact=True).first.click()
            page.wait_for_timeout(SETTLE_MS)
            sent.clear()
            page.wait_for_timeout(WINDOW_MS)
            return set(sent)

        seen = {tab: ticking_in(tab) for tab in ("Training", "Jobs", "Dataset", "Quickstart")}
    assert len(seen["Dataset"]) == 1, seen
    [announcement] = seen["Dataset"]  # a tab without live parts: only the page-wide announcement ticks
    own = {tab: fns - {announcement} for tab, fns in seen.items()}
    assert all(announcement in fns for fns in seen.values()), seen
    # the tab's own timer, one handler per tick; Quickstart's again when it is back in view
    assert all(len(fns) == 1 for tab, fns in own.items() if tab != "Dataset"), seen
    assert len(own["Quickstart"] | own["Training"] | own["Jobs"]) == 3, seen  # each its own

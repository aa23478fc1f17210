"""A chosen path longer than its field shows its end, in Debian chromium: the quickstart's two tokenizers,
`tokenizers/<long run name>/en.model` and `…/en_am.model`, overflow the Tokenizer tab's field and still read
apart (issue 49: both were cut to the same text), and the whole path is there again while the field is edited."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from tests.browser_helpers import AppProcess, choose, chromium_page, chromium_path, running_app

pytestmark = [pytest.mark.browser, pytest.mark.slow]
playwright_api = pytest.importorskip("playwright.sync_api")

FOLDER = "tokenizers/quickstart-quick-20261128-123456"  # a quickstart run's name, as the dashboard makes it
FIELD = "tok-inspect-tokenizer"


@pytest.fixture(scope="module")
def dashboard(module_tmp: Path) -> Iterator[AppProcess]:
    """The real app for a workspace holding the two tokenizer files of a quickstart run (listed, never loaded)."""
    chromium_path()
    workspace = module_tmp / "workspace"
    (workspace / FOLDER).mkdir(parents=True)
    for name in ("en.model", "en_am.model"):
        (workspace / FOLDER / name).write_bytes(b"listed by name")
    with running_app(workspace, module_tmp / "app.log") as app:
        yield app


def test_two_long_paths_that_share_their_start_read_apart_in_their_field(dashboard: AppProcess) -> None:
    shown = {}
    with chromium_page(dashboard.url, "Tokenizer", width=1280) as page:
        box = page.locator(f"#{FIELD} input").first
        for name in ("en.model", "en_am.model"):
            choose(page, FIELD, f"{FOLDER}/{name}")
            box.blur()
            assert box.evaluate("el => el.scrollWidth > el.clientWidth")  # the path does not fit: something is cut
            assert box.evaluate("el => getComputedStyle(el).direction") == "rtl"  # … at its start
            shown[name] = box.screenshot()
        assert shown["en.model"] != shown["en_am.model"]  # the file names show, so the two fields differ
        box.focus()  # edited: the whole path from its start, left to right
        assert box.evaluate("el => getComputedStyle(el).direction") == "ltr"
        assert box.input_value() == f"{FOLDER}/en_am.model"

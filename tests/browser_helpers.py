"""Helpers for the dashboard tests: start the real app.py in a subprocess, drive Debian chromium."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx
import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
]


def free_port() -> int:
    """Return a free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def chromium_path() -> str:
    """Return the Debian chromium binary, or skip the test with the reason when it is missing."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("Debian chromium is not installed (./test.sh installs it when run as root)")
    return path


class AppProcess:
    """A running `app.py` subprocess: its URL, log file and workspace."""

    def __init__(self, proc: subprocess.Popen[bytes], url: str, log: Path, workspace: Path) -> None:
        self.proc = proc
        self.url = url
        self.log = log
        self.workspace = workspace

    def log_text(self) -> str:
        """Return what the app printed so far."""
        return self.log.read_text(encoding="utf-8", errors="replace") if self.log.is_file() else ""


@contextmanager
def running_app(workspace: Path, log: Path, auth: str | None = None, timeout: float = 120.0,
                config: Path | None = None) -> Iterator[AppProcess]:
    """Start app.py on a free port for `workspace` (with the settings file `config` over the defaults); yield once
    it printed its address; stop it after."""
    port = free_port()
    command = [sys.executable, str(REPO_ROOT / "app.py"), "--port", str(port), "--workspace", str(workspace)]
    if auth:
        command += ["--auth", auth]
    if config is not None:
        command += ["--config", str(config)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("LINGUAFORGE_UI_AUTH", None)
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    app = AppProcess(proc, f"http://127.0.0.1:{port}", log, workspace)
    try:
        deadline = time.monotonic() + timeout
        while f"running on {app.url}" not in app.log_text():
            if proc.poll() is not None:
                raise AssertionError(f"app.py exited with {proc.returncode}:\n{app.log_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"app.py did not start within {timeout:.0f}s:\n{app.log_text()[-3000:]}")
            time.sleep(0.3)
        yield app
    finally:
        stop_app(proc)


def stop_app(proc: subprocess.Popen[bytes]) -> None:
    """Stop app.py with SIGTERM (it stops its worker and TensorBoard), SIGKILL of its group if it hangs."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=45)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def wait_http(url: str, timeout: float = 60.0, auth: tuple[str, str] | None = None) -> httpx.Response:
    """Return the first 200 response of GET `url`, retrying until `timeout`; fail with the last status."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            response = httpx.get(url, auth=auth, timeout=10.0, follow_redirects=True)
            if response.status_code == 200:
                return response
            last = f"HTTP {response.status_code}: {response.text[:200]}"
        except httpx.HTTPError as exc:
            last = str(exc)
        time.sleep(0.5)
    raise AssertionError(f"{url} did not answer 200 within {timeout:.0f}s ({last})")


def choose(page, elem_id: str, value: str) -> None:
    """Choose `value` in the dropdown `elem_id` as a user does (open its list, click the option); return once
    the field shows it. Typing the value and pressing Enter races the list's filtering: the Enter can land
    before the list is filtered and keep the previous choice."""
    expect = pytest.importorskip("playwright.sync_api").expect
    field = page.locator(f"#{elem_id} input").first
    field.click()
    page.get_by_role("option", name=value, exact=True).click()
    expect(field).to_have_value(value, timeout=60_000)  # not Playwright's 5 s default: a loaded machine is slow


@contextmanager
def chromium_page(url: str, tab: str, width: int = 1400, height: int = 1000, timeout_ms: int = 60_000) -> Iterator[object]:
    """Yield a Playwright page in Debian chromium at `url` with the top-level tab `tab` open; close it after.

    Skips the test when Playwright or chromium is missing.
    """
    playwright_api = pytest.importorskip("playwright.sync_api")
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.set_default_timeout(timeout_ms)
            page.goto(url)
            open_tab(page, tab)
            yield page
        finally:
            browser.close()


INTERNAL_WORDS = {  # the words a person should never have to read (issues 35 and 49), each as the page could show it
    "a job kind": r"\((?:quickstart|dataset|tokenizer|codec|embeddings|eval)\.[a-z]+\)|\bquickstart\.(?:tts|lm)\b"
                  r"|\beval\.tts\b|\bcodec\.train\b|\bdataset\.(?:import|sample)\b"
                  r"|\btokenizer\.(?:train|extend|merge|sweep)\b|\bembeddings\.extend\b",
    "a check id": r"\b(?:memory\.batch|checkpoint\.(?:rows|family|fingerprint)|freeze\.range|tokenizer\.base"
                  r"|embeddings\.provenance|disk\.checkpoints|config\.declared_vocab)\b",
    "a command line": r"python -m core|app\.py --auth|--[a-z]+(?:-[a-z]+)+\b",
    "the CLI's own names": r"eval\.asr|`?eval tts`?|\bunk rate\b",
    "an id with underscores": r"\b(?:no_stop|length_out_of_range|prompt_copying|text_ignored|val_base_loss"
                              r"|dtw_identification|mel_top1|mel_loss|text_loss|unk_rate)\b",
    "a figure that is not there": r"CPU seconds —|duration outside -",
    "a bar for nothing": r"not started",
    # a file name (`en_am.model`) is not one, nor a clip id (`en_0001`: every part after the first starts with a letter)
    "a snake_case key": r"\b[a-z][a-z0-9]*(?:_[a-z][a-z0-9]*)+\b(?![.\w])",
    "a backtick": r"`",
    "a Python dict": r"\{'[^']*':|\bNone\}",
    "an absolute path": r"(?<![\w.:/~])/(?:[\w.-]+/)+[\w.-]*",
    "a CLI flag": r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*\b",
    "family ids in a sentence": r"\b(?:chatterbox|indextts|chatterbox-turbo|linguaforge) (?:and|or|have|has)\b",
}


def internal_words(text: str) -> list[tuple[str, str]]:
    """Return (kind, the words) of every INTERNAL_WORDS match in `text` (a page's inner text: a closed details fold's
    contents are not in it)."""
    return [(kind, match.group(0)) for kind, pattern in INTERNAL_WORDS.items() for match in re.finditer(pattern, text)]


TAB_SELECTED_WITHIN_MS = 5_000  # how long one click is given to select its tab before the next click


def open_tab(page, name: str, timeout_ms: int = 60_000) -> None:
    """Click the top-level tab `name` until the page shows it selected (`aria-selected`), for at most `timeout_ms`.

    A tab never navigates, so the click does not wait for navigations a busy page may still have scheduled (at load
    7–13 one such wait outlasted 60 s after the click was done: docs/benchmarks.md, runs 12 and 13). A click on a page
    still mounting its tabs can be undone: in suite run 23 the Training tab was clicked once and the first tab stayed
    selected for the whole minute the test then waited. So the tab's own selected state is the condition, and a click
    that did not take is made again, as a person would."""
    from playwright.sync_api import expect

    tab = page.get_by_role("tab", name=name, exact=True).first
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        tab.click(no_wait_after=True)
        try:
            expect(tab).to_have_attribute("aria-selected", "true", timeout=TAB_SELECTED_WITHIN_MS)
            return
        except AssertionError:
            if time.monotonic() >= deadline:
                raise

"""The dashboard in a real browser: the real app.py (worker, TensorBoard, Gradio) with --auth, driven
by Debian chromium through Playwright. One app start is shared by the module's tests, in order."""

from __future__ import annotations

import json
import shlex
import shutil
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from core.data.sample_text import AMHARIC_SENTENCES, ENGLISH_SENTENCES
from core.runs import RunFolder, progress_view
from jobs.records import JobStore
from tests.fixture_paths import INDEXTTS_BPE
from tests.browser_helpers import CHROMIUM_ARGS, AppProcess, chromium_path, open_tab, running_app, wait_http

pytestmark = [pytest.mark.browser, pytest.mark.slow]
playwright_api = pytest.importorskip("playwright.sync_api")

USER, PASSWORD = "tester", "s3cret-pass"
RUN = "ui-run"
MAX_STEPS = 40


@pytest.fixture(scope="module")
def dashboard(module_tmp: Path) -> Iterator[AppProcess]:
    """The real app on a free port with --auth, for a fresh workspace holding the IndexTTS2 tokenizer."""
    chromium_path()
    root = module_tmp
    workspace = root / "workspace"
    (workspace / "tokenizers").mkdir(parents=True)
    shutil.copyfile(INDEXTTS_BPE, workspace / "tokenizers" / "indextts.model")
    with running_app(workspace, root / "app.log", auth=f"{USER}:{PASSWORD}") as app:
        yield app


@pytest.fixture(scope="module")
def screens(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder the screenshots of each tab are saved in."""
    return tmp_path_factory.mktemp("screenshots")


@pytest.fixture(scope="module")
def page(dashboard: AppProcess):
    """A chromium page logged in to the dashboard through its login form."""
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            tab = browser.new_page(viewport={"width": 1400, "height": 1000})
            tab.set_default_timeout(60_000)  # a ceiling, not a pace: a loaded 2-core machine took 30 s for one tab click
            tab.goto(dashboard.url)
            tab.get_by_label("username").fill(USER)
            tab.get_by_label("password").fill(PASSWORD)
            tab.get_by_role("button", name="Login").click()
            tab.get_by_role("tab", name="Training").wait_for()
            yield tab
        finally:
            browser.close()


def fill(page, elem_id: str, value: object, commit: bool = False) -> None:
    """Type `value` into the input of the component `elem_id`; `commit` presses Enter (dropdowns)."""
    field = page.locator(f"#{elem_id} input, #{elem_id} textarea").first
    field.fill(str(value))
    if commit:
        field.press("Enter")
    field.blur()


def open_accordion(page, title: str, field_id: str) -> None:
    """Open the accordion `title` and return once its text field `field_id` keeps what is typed into it.

    Gradio mounts an accordion's content when it first opens and then sets each field's value once
    more, so text typed in the first moments after mounting can be replaced by the default (seen:
    the codec output typed at once came back as `codecs/codec.pt`). A probe value is typed until it
    survives a settle of 0.5 s; then the field's default is put back.
    """
    page.get_by_text(title).click()
    field = page.locator(f"#{field_id} input, #{field_id} textarea").first
    field.wait_for(state="visible")
    default = field.input_value()
    for _ in range(10):
        field.fill("probe")
        page.wait_for_timeout(500)
        if field.input_value() == "probe":
            field.fill(default)
            return
    raise AssertionError(f"#{field_id} in the accordion {title!r} does not keep a typed value")


def wait_text(page, elem_id: str, text: str, timeout_s: float) -> str:
    """Wait until the component `elem_id` shows `text`; fail with what it showed instead."""
    locator = page.locator(f"#{elem_id}")
    deadline = time.monotonic() + timeout_s
    shown = ""
    while time.monotonic() < deadline:
        shown = locator.inner_text()
        if text in shown:
            return shown
        if "**failed**" in shown or ": failed" in shown:
            break
        time.sleep(0.5)
    raise AssertionError(f"#{elem_id} did not show {text!r} within {timeout_s:.0f}s; it shows: {shown[:1500]}")


def last_checkpoint(workspace: Path) -> str:
    """Return the workspace-relative last checkpoint of the UI training run (from its status.json)."""
    status = json.loads((workspace / "runs" / RUN / "status.json").read_text(encoding="utf-8"))
    return str(Path(status["last_checkpoint"]).resolve().relative_to(workspace.resolve()))


def test_auth_rejects_unauthenticated_requests(dashboard: AppProcess) -> None:
    """Without the login, the app's config and API and the TensorBoard proxy answer 401."""
    for path in ("/config", "/gradio_api/info", "/tensorboard/", "/tensorboard/data/runs"):
        response = httpx.get(dashboard.url + path, timeout=10.0)
        assert response.status_code == 401, (path, response.status_code, response.text[:200])
    page_html = httpx.get(dashboard.url + "/", timeout=10.0).text
    assert "Preflight" not in page_html
    assert httpx.get(dashboard.url + "/tensorboard/", auth=(USER, "wrong"), timeout=10.0).status_code == 401
    assert "TensorBoard" in wait_http(dashboard.url + "/tensorboard/", auth=(USER, PASSWORD)).text


def test_pipeline_in_browser(dashboard: AppProcess, page, screens: Path) -> None:
    """Sample dataset → codec + tokenizer → tiny training watched to the end → reload → TensorBoard."""
    workspace = dashboard.workspace

    open_tab(page, "Dataset")
    fill(page, "ds-input", "/etc")
    fill(page, "ds-name", "outside")
    page.locator("#ds-import-btn").click()
    page.get_by_text("outside the allowed folders").first.wait_for()

    fill(page, "ds-sample-name", "sample")
    fill(page, "ds-sample-per", 4)
    page.locator("#ds-sample-btn").click()

    (workspace / "corpus").mkdir()
    corpus = "\n".join([*ENGLISH_SENTENCES, *AMHARIC_SENTENCES] * 2) + "\n"
    (workspace / "corpus/sample.txt").write_text(corpus, encoding="utf-8")
    open_tab(page, "Tokenizer")
    fill(page, "tok-train-corpus", "corpus/sample.txt", commit=True)
    fill(page, "tok-train-size", 400)
    fill(page, "tok-train-output", "tokenizers/sample.model")
    page.locator("#tok-train-btn").click()

    open_tab(page, "Dataset")
    wait_text(page, "ds-status", "succeeded", 180)
    wait_text(page, "ds-summary", "8 kept", 30)
    assert page.locator("#ds-kept").inner_text().count("espeak") >= 2
    page.locator("#ds-player audio, #ds-player button").first.wait_for(state="attached")
    page.screenshot(path=str(screens / "dataset.png"), full_page=True)
    open_accordion(page, "Codec for this dataset", "ds-codec-out")
    fill(page, "ds-codec-out", "codecs/sample.pt")
    page.locator("#ds-codec-btn").click()

    open_tab(page, "Tokenizer")
    wait_text(page, "tok-status", "succeeded", 180)
    fill(page, "tok-inspect-tokenizer", "tokenizers/sample.model", commit=True)
    fill(page, "tok-inspect-corpus", "corpus/sample.txt", commit=True)
    page.locator("#tok-inspect-btn").click()
    wait_text(page, "tok-report", "unknown-piece rate", 60)
    page.screenshot(path=str(screens / "tokenizer.png"), full_page=True)

    open_tab(page, "Dataset")
    wait_text(page, "ds-codec-status", "codecs/sample.pt", 180)

    open_tab(page, "Training")
    page.locator("#train-load").click()
    page.wait_for_function("() => document.querySelector('#train-batch input').value === '8'")  # preset:tiny
    fill(page, "train-name", RUN)
    fill(page, "train-tokenizer", "tokenizers/sample.model", commit=True)
    fill(page, "train-codec", "codecs/sample.pt", commit=True)
    fill(page, "train-manifest", "datasets/sample/manifest.jsonl", commit=True)
    fill(page, "train-max-steps", MAX_STEPS)
    fill(page, "train-val-every", 20)
    fill(page, "train-save-every", 20)
    fill(page, "train-batch", 4)
    wait_text(page, "preflight-summary", "Ready to start", 90)
    page.get_by_text("Details: the command Start runs").click()
    preview = page.locator("#train-command input, #train-command textarea").first.input_value()
    page.locator("#train-start").click()
    wait_text(page, "train-message", "Started training job", 30)
    job_id = page.locator("#train-job input, #train-job textarea").first.input_value()
    argv = JobStore(workspace / "jobs.sqlite").get(job_id)["argv"]
    assert preview == shlex.join(["python", "-m", "core", *argv]), "the preview is not the command the job runs"
    assert f"--config {workspace.resolve()}/runs/{RUN}/config.yaml --resume auto" in preview

    # Wait for the run's final state (stable, however fast the run is), then check the bar against
    # what the run wrote: its status and the metrics lines it logged on the way.
    try:
        wait_text(page, "train-progress-text", "finished", 400)
    except AssertionError as exc:
        job = JobStore(workspace / "jobs.sqlite").get(job_id)
        raise AssertionError(f"{exc}\njob {job['status']}: {job.get('error')}") from None
    bar = page.locator("#train-progress")
    assert (bar.get_attribute("aria-valuenow"), bar.get_attribute("aria-valuemax")) == (str(MAX_STEPS), str(MAX_STEPS))
    run = RunFolder(workspace / "runs" / RUN)
    status = run.status()
    assert (status["state"], status["step"], status["max_steps"]) == ("finished", MAX_STEPS, MAX_STEPS)
    assert progress_view(None, status).text(show_state=True) in page.locator("#train-progress-text").inner_text()
    steps = [row["step"] for row in run.metrics("train")]
    assert steps == sorted(set(steps)) and any(0 < step < MAX_STEPS for step in steps), steps
    page.screenshot(path=str(screens / "training.png"), full_page=True)

    page.reload()
    open_tab(page, "Training")
    page.wait_for_function(
        "id => (document.querySelector('#train-job input, #train-job textarea') || {}).value === id", arg=job_id)
    open_tab(page, "Jobs")
    wait_text(page, "jobs-table", "succeeded", 30)
    assert job_id in page.locator("#jobs-table").inner_text()
    page.screenshot(path=str(screens / "jobs.png"), full_page=True)

    open_tab(page, "TensorBoard")
    frame = page.frame_locator("#tensorboard-frame")
    frame.get_by_text("TensorBoard").first.wait_for(timeout=60_000)
    frame.get_by_text(RUN).first.wait_for(timeout=60_000)
    page.screenshot(path=str(screens / "tensorboard.png"))


def test_doctor_failure_disables_start(dashboard: AppProcess, page, screens: Path) -> None:
    """A checkpoint made for another tokenizer fails the doctor: Start is disabled and the fix is shown."""
    open_tab(page, "Training")
    fill(page, "train-name", "mismatch")
    fill(page, "train-tokenizer", "tokenizers/indextts.model", commit=True)
    fill(page, "train-checkpoint", last_checkpoint(dashboard.workspace), commit=True)
    summary = wait_text(page, "preflight-summary", "Start is disabled", 90)
    assert "embedding rows for the tokenizer" in summary and "checkpoint.rows" not in summary
    assert page.locator("#train-start").is_disabled()
    table = page.locator("#preflight-table").inner_text()
    assert "the Embeddings tab" in table and "python -m" not in table, table  # the fix, in the dashboard's words
    page.screenshot(path=str(screens / "training-doctor-fail.png"), full_page=True)

    fill(page, "train-manifest", "/etc/passwd", commit=True)
    wait_text(page, "preflight-table", "outside the allowed folders", 60)
    assert page.locator("#train-start").is_disabled()

    open_tab(page, "Embeddings")
    fill(page, "emb-checkpoint", last_checkpoint(dashboard.workspace), commit=True)
    fill(page, "emb-base", "tokenizers/sample.model", commit=True)
    fill(page, "emb-new", "tokenizers/indextts.model", commit=True)
    page.locator("#emb-check").click()
    plan = wait_text(page, "emb-plan", "Extend will refuse", 60)  # not a prefix extension: Extend refuses it
    assert "12000" in plan and "keep every base piece at its id" in plan
    assert "rows after" not in plan
    page.screenshot(path=str(screens / "embeddings.png"), full_page=True)


def test_synthesize_in_browser(dashboard: AppProcess, page, screens: Path) -> None:
    """Generate speech from the trained checkpoint; the streamed player's audio has a non-zero duration."""
    open_tab(page, "Inference")
    page.screenshot(path=str(screens / "inference.png"), full_page=True)
    fill(page, "inf-checkpoint", last_checkpoint(dashboard.workspace), commit=True)
    wait_text(page, "inf-meta", "tokenizer", 60)
    fill(page, "inf-text", "Hello.")
    page.locator("#inf-tts-btn").click()
    wait_text(page, "inf-status", "succeeded", 300)
    page.wait_for_function(  # the streamed player's download link: the whole stream once it has ended
        "() => document.querySelector('#inf-audio a[download]') !== null", timeout=60_000)
    duration = page.evaluate(
        """() => new Promise((resolve, reject) => {
            const audio = new Audio(document.querySelector('#inf-audio a[download]').href);
            audio.onloadedmetadata = () => resolve(audio.duration);
            audio.onerror = () => reject(new Error('the audio did not load'));
        })"""
    )
    assert duration > 0.1, duration
    page.screenshot(path=str(screens / "inference.png"), full_page=True)

    # Compare checkpoints: an eval.tts job for the trained checkpoint, then its row and a player
    (dashboard.workspace / "heldout.txt").write_text("Hello there.\nGood morning.\n", encoding="utf-8")
    page.get_by_role("tab", name="Compare checkpoints").click()
    open_accordion(page, "Evaluate a checkpoint", "cmp-sentences")
    fill(page, "cmp-checkpoint", last_checkpoint(dashboard.workspace), commit=True)
    fill(page, "cmp-sentences", "heldout.txt", commit=True)
    page.locator("#cmp-eval-btn").click()
    wait_text(page, "cmp-eval-status", "succeeded", 300)
    wait_text(page, "cmp-table", f"step_{MAX_STEPS:07d}.pt", 60)
    page.locator("#cmp-audio-0 audio, #cmp-audio-0 button").first.wait_for(state="attached")
    assert "Hello there." in page.locator("#cmp-sentence").inner_text() + page.locator("#cmp-sentence input").input_value()
    page.screenshot(path=str(screens / "compare.png"), full_page=True)

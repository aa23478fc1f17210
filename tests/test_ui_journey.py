"""The dashboard as a user lives in it: a reduced TTS quickstart started from the Quickstart tab, followed
by the page that pressed Run and by a second page opened mid-run, then every tab looked at afterwards.

The real app.py (worker, TensorBoard, Gradio) in Debian chromium through Playwright. What the pages
showed is recorded in the page itself (a MutationObserver installed before the page loads, and a
reading every second with its time) and asserted after the run, so no assertion depends on catching
an intermediate value. Charts are read from the figures Plotly drew in the page (`gd.data` and the
drawn bars), never from what the server meant to send. Screenshots of every tab go to
$LINGUAFORGE_SCREENSHOT_DIR (docs/images/ comes from it), else to a temporary folder.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest
import yaml
from PIL import Image

from tests.browser_helpers import CHROMIUM_ARGS, AppProcess, chromium_path, internal_words, open_tab, running_app
from jobs.records import JobStore

pytestmark = [pytest.mark.browser, pytest.mark.slow]
playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect
expect.set_options(timeout=60_000)  # a slow shared machine: generous waits, never fixed sleeps

STAGE_SECONDS = {"sample": 21.4, "codec": 11.9, "tokenizer.base": 2.6, "train.base": 29.3, "tokenizer.extend": 7.0,
                 "embeddings.extend": 15.4, "preprocess.am": 14.1, "validate.start": 25.4, "validate.en.start": 25.6,
                 "train.finetune": 30.9, "prune": 11.8, "validate.en.end": 19.0, "synthesize.am.1": 12.3,
                 "synthesize.en.1": 12.4, "eval.en.base": 41.2, "eval.tts": 59.2}
REDUCED_TTS = {  # the whole journey cut to its smallest useful size: a few minutes on an idle 2-core CPU
    "journey": "tts",
    "sample": {"per_language": 12},
    "val_ratio": 0.3,
    "codec": {"codebook_size": 32, "iterations": 10},
    "tokenizer": {"base_size": 200, "extended_size": 700},
    "model": {"preset": "tiny", "max_speech_tokens": 600},
    "base": {"steps": 10, "batch_size": 4, "lr": 2.0e-3, "warmup_steps": 2},
    "finetune": {"steps": 10, "batch_size": 4, "lr": 2.0e-3, "warmup_steps": 2, "val_every": 5},
    "synthesis": {"sentences": 1, "temperature": 0.8},
    "eval": {"sentences": 2},  # an eval.json beside the final checkpoint, for the Compare tab
    "stage_timeout_s": 900,
    # each stage's wall seconds in a run of this module on the 2-core test machine: the progress line's weights
    "stage_seconds": STAGE_SECONDS,
}
JOURNEY_TIMEOUT_MS = 1_200_000
ETHIOPIC_FAMILY = "LinguaForge Noto Sans Ethiopic"
RECORDER = """
(() => {
  window.__lf = {progress: [], text: [], samples: []};
  const push = (list, value) => { if (value !== undefined && value !== null && list[list.length - 1] !== value) list.push(value); };
  const bar = () => document.querySelector('#qs-progress');
  const record = () => {
    if (bar()) push(window.__lf.progress, Number(bar().getAttribute('aria-valuenow')));
    const text = document.querySelector('#qs-progress-text');
    if (text) push(window.__lf.text, text.textContent);
  };
  new MutationObserver(record).observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
  setInterval(() => {  // what a person reads every second, and when: the bar's value and the job's status line
    const status = document.querySelector('#qs-status');
    if (bar() && status)
      window.__lf.samples.push([Date.now() / 1000, Number(bar().getAttribute('aria-valuenow')), status.textContent]);
  }, 1000);
})();
"""
JOURNEY_SEEN: dict[str, list] = {}  # what the first page recorded during the journey, for the progress test


@pytest.fixture(scope="module")
def dashboard(module_tmp: Path) -> Iterator[AppProcess]:
    """The real app on a free port for a fresh workspace holding the reduced quickstart preset."""
    chromium_path()
    root = module_tmp
    workspace = root / "workspace"
    (workspace / "quickstart").mkdir(parents=True)
    (workspace / "quickstart" / "reduced.yaml").write_text(yaml.safe_dump(REDUCED_TTS), encoding="utf-8")
    with running_app(workspace, root / "app.log") as app:
        yield app


@pytest.fixture(scope="module")
def screens(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the screenshots of each tab go: $LINGUAFORGE_SCREENSHOT_DIR, else a temporary folder."""
    chosen = os.environ.get("LINGUAFORGE_SCREENSHOT_DIR")
    folder = Path(chosen) if chosen else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def browser(dashboard: AppProcess):
    """One chromium for the module; each test opens its own pages."""
    with playwright_api.sync_playwright() as p:
        instance = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            yield instance
        finally:
            instance.close()


@pytest.fixture(autouse=True)
def close_pages(request: pytest.FixtureRequest) -> Iterator[None]:
    """Close every page a test opened, whether it passed or not: an open page keeps polling the app."""
    yield
    if "browser" in request.fixturenames:
        for context in request.getfixturevalue("browser").contexts:
            context.close()


def open_page(browser, url: str):
    """Return a new page at `url` that records what the Quickstart tab shows (see RECORDER)."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(60_000)
    page.add_init_script(RECORDER)
    page.goto(url)
    page.get_by_role("tab", name="Quickstart").wait_for()
    return page


def quickstart_jobs(workspace: Path) -> list[dict]:
    """Return the quickstart job records of the workspace (newest first)."""
    return [job for job in JobStore(workspace / "jobs.sqlite").list() if job["kind"].startswith("quickstart.")]


FIGURE = """id => {
  const gd = document.querySelector(`#${id} .js-plotly-plot`);
  if (!gd || !gd.data || !gd._fullData) return null;
  return gd.data.map((t, i) => ({name: t.name, type: t.type, x: Array.from(t.x || []), y: Array.from(t.y || []),
                                 colour: (gd._fullData[i].line || {}).color || (gd._fullData[i].marker || {}).color}));
}"""
BAR_HEIGHTS = """id => [...document.querySelectorAll(`#${id} .js-plotly-plot g.trace.bars g.point path`)]
  .map(p => p.getBoundingClientRect().height)"""
SPEECH_LOSS, TEXT_LOSS = "speech loss (speech codes)", "text loss (next text piece)"
SPLIT_WORDS = {"train": "training", "val": "validation"}


def drawn_traces(page, elem_id: str, count: int = 1, timeout_ms: int = 90_000) -> list[dict]:
    """Return the traces Plotly drew in the chart `elem_id` (name, x, y, colour, from the page's figure) once it
    holds at least `count` of them."""
    page.wait_for_function(f"id => {{ const t = ({FIGURE})(id); return t !== null && t.length >= {count}; }}",
                           arg=elem_id, timeout=timeout_ms)
    return page.evaluate(FIGURE, elem_id)


def expected_loss_series(run_dir: Path, splits: tuple[str, ...] = ("train", "val")) -> list[tuple[str, list, list]]:
    """Return (series name, steps, values) of each loss a chart of the run must draw, in order, from its
    metrics.jsonl and the loss weights of its config.yaml: speech then text loss, each split in turn, a loss
    whose weight is 0 left out; a step logged twice counts once, with its last value."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    weights = yaml.safe_load((run_dir / "config.yaml").read_text()).get("loss") or {}
    series = []
    for words, key, weight in ((SPEECH_LOSS, "mel_loss", "mel_weight"), (TEXT_LOSS, "text_loss", "text_weight")):
        if weights.get(weight) == 0:
            continue
        for split in splits:
            points = {row["step"]: row[key] for row in rows
                      if row.get("split", "train") == split and isinstance(row.get(key), float)}
            if points:
                series.append((f"{words} · {SPLIT_WORDS[split]}", sorted(points), [points[s] for s in sorted(points)]))
    return series


def assert_series(traces: list[dict], expected: list[tuple[str, list, list]]) -> None:
    """Assert the drawn traces are the expected series: names in order, steps in order, each value."""
    assert [(t["name"], t["x"]) for t in traces] == [(name, steps) for name, steps, _ in expected], traces
    for trace, (_, _, values) in zip(traces, expected):
        assert trace["y"] == pytest.approx(values, rel=1e-6), trace["name"]


@pytest.mark.timeout(2400)  # the whole journey; a loaded shared machine takes many minutes
def test_quickstart_is_followed_by_every_open_page(dashboard: AppProcess, browser, screens: Path) -> None:
    """Run once (a double click starts one journey), a second page opened mid-run follows it to the end:
    monotonic progress with elapsed and ETA, the stage's own progress, players, report, served audio."""
    first = open_page(browser, dashboard.url)
    expect(first.locator("#qs-tts")).to_be_enabled()
    preset = first.locator("#qs-preset input").first
    preset.fill("quickstart/reduced.yaml")
    preset.press("Enter")
    first.locator("#qs-tts").dblclick()
    expect(first.locator("#qs-tts")).to_be_disabled()
    expect(first.locator("#qs-progress-text")).to_contain_text("stage", timeout=120_000)

    second = open_page(browser, dashboard.url)
    expect(second.locator("#qs-tts")).to_be_disabled()
    for page in (first, second):
        expect(page.locator("#qs-status")).to_contain_text(re.compile("succeeded|failed"), timeout=JOURNEY_TIMEOUT_MS)
        assert "succeeded" in page.locator("#qs-status").inner_text(), page.locator("#qs-status").inner_text()
        page.locator("#qs-am audio, #qs-am button").first.wait_for(state="attached")
        page.locator("#qs-en audio, #qs-en button").first.wait_for(state="attached")
        expect(page.locator("#qs-report")).to_contain_text("Frozen base rows")
        expect(page.locator("#qs-report")).to_contain_text("English kept (the base language)")
        # what English kept, before and after the fine-tune, in words above the report
        expect(page.locator("#qs-english")).to_contain_text(re.compile(
            r"What English kept\. English (?:kept|degraded|lost) through the Amharic fine-tune: the model predicts held-out "
            r"English speech \d+% (?:worse|better) than before the fine-tune .*; held-out English sentences identified "
            r"[\d.]+ → [\d.]+"))
        expect(page.locator("#qs-tts")).to_be_enabled()

    jobs = quickstart_jobs(dashboard.workspace)
    assert [job["status"] for job in jobs] == ["succeeded"], jobs  # the double click started one journey
    for page in (first, second):
        shown = page.evaluate("window.__lf")
        progress = shown["progress"]
        assert progress == sorted(progress), f"progress went backwards: {progress}"
        assert progress[-1] == 1.0 and len(set(progress)) >= 3, progress
        assert any("elapsed" in text and "ETA" in text for text in shown["text"]), shown["text"]
        assert any(re.search(r"stage \d+/\d+: .*\(\d+%\)", text) for text in shown["text"]), shown["text"]
        assert any("Train the English base model" in text for text in shown["text"]), shown["text"]
    first.wait_for_function(  # the once-a-second reading has seen the end too
        "() => { const s = window.__lf.samples; return s.length > 0 && s[s.length - 1][2].includes('succeeded'); }")
    JOURNEY_SEEN.update(first.evaluate("window.__lf"))
    assert "elapsed" in second.locator("#qs-progress-text").inner_text()

    links = second.eval_on_selector_all("#qs-report a[href$='.wav']", "els => els.map(e => e.href)")
    assert len(links) >= 2, links
    for href in links:
        response = second.request.get(href)
        assert response.status == 200 and len(response.body()) > 1000, (href, response.status)

    # Amharic in the report renders with the app's own Ethiopic webfont
    faces = second.evaluate(
        "async f => (await document.fonts.load(`16px \"${f}\"`, 'ሰላም')).map(face => face.status)", ETHIOPIC_FAMILY)
    assert faces and all(status == "loaded" for status in faces), faces
    amharic_font = second.evaluate("""() => {
        const cell = [...document.querySelectorAll('#qs-report td')].find(td => /[\\u1200-\\u137F]/.test(td.textContent));
        return cell ? getComputedStyle(cell).fontFamily : null;
    }""")
    assert amharic_font and ETHIOPIC_FAMILY in amharic_font, amharic_font
    second.screenshot(path=str(screens / "quickstart.png"), full_page=True)
    first.close()
    second.close()


def test_quickstart_progress_read_every_second_never_goes_back_and_follows_the_time(dashboard: AppProcess,
                                                                                    record_property) -> None:
    """Read every second during the journey: the bar never goes back, stays within 15 points of the share of
    the journey's time gone by (elapsed ÷ total, from its job record), is below 100% while the job has not
    succeeded and moves through the later stages; the status line above it carries no second progress
    figure; no ETA was a guess in hours."""
    samples = JOURNEY_SEEN.get("samples")
    assert samples, "the quickstart test did not record the journey"
    values = [value for _, value, _ in samples]
    assert values == sorted(values), f"progress went backwards: {values}"
    [job] = quickstart_jobs(dashboard.workspace)
    start, end = job["started_at"], job["finished_at"]
    during = [(at, value) for at, value, status in samples if start + 2 < at < end and "succeeded" not in status]
    assert len(during) >= 0.5 * (end - start), (len(during), end - start)  # a reading (about) every second
    gaps = [abs(value - (at - start) / (end - start)) for at, value in during]
    record_property("worst_points_from_elapsed_share", round(100 * max(gaps), 1))  # in the JUnit report
    off = [(round(at - start), value, round((at - start) / (end - start), 3)) for at, value in during
           if abs(value - (at - start) / (end - start)) > 0.15]
    assert not off, f"{len(off)} readings more than 15 points from elapsed ÷ total ({end - start:.0f} s): {off[:20]}"
    assert all(value < 1.0 for _, value in during), during
    assert any(0.6 < value < 1.0 for _, value in during), values  # the last stages are seen, not skipped
    assert values[-1] == 1.0 and "succeeded" in samples[-1][2], samples[-1]
    assert not [status for _, _, status in samples if "%" in status], samples  # one progress line: the box's
    etas = [re.search(r"ETA (about )?(\d+)h", text) for text in JOURNEY_SEEN["text"]]
    assert not any(etas), JOURNEY_SEEN["text"]  # a reduced journey takes minutes: no ETA in hours
    assert any("ETA about" in text and "a guess" in text for text in JOURNEY_SEEN["text"])  # said while unsure
    assert any(re.search(r"ETA \d+(m\d+)?s", text) for text in JOURNEY_SEEN["text"])  # then said plainly


def test_tabs_after_the_quickstart(dashboard: AppProcess, browser, screens: Path) -> None:
    """After the journey: datasets listed at any depth with clips and hours, the loss chart drawn from
    numbers (one SVG point per logged metrics line), the loader names what the form holds, paths shown
    relative to the workspace, Stop and Cancel disabled with nothing running, jobs with kind, status, age,
    each stage job named by its run and stage."""
    workspace = dashboard.workspace
    report = json.loads(next(workspace.glob("runs/*/report.json")).read_text(encoding="utf-8"))
    name = report["name"]
    page = open_page(browser, dashboard.url)

    open_tab(page, "Dataset")
    clips = len((workspace / "datasets" / name / "sample" / "manifest.jsonl").read_text().splitlines())
    dataset = page.locator("#ds-select input").first
    dataset.click()
    option = page.get_by_role("option").filter(has_text=f"{name}/sample — {clips} clips, ")
    label = option.inner_text().strip().splitlines()[-1]  # after the ✓ of a selected option
    assert re.fullmatch(rf"{re.escape(name)}/sample — {clips} clips, \d+\.\d{{3}} h", label), label
    dataset.fill(f"{name}/sample")
    dataset.press("Enter")
    expect(page.locator("#ds-summary")).to_contain_text(f"{clips} kept")
    page.screenshot(path=str(screens / "dataset.png"), full_page=True)

    open_tab(page, "Training")
    finetune = Path(report["training"]["finetune_run"])
    expect(page.locator("#train-preset input").first).to_have_value(f"runs/{finetune.name}/config.yaml")
    tokenizer = page.locator("#train-tokenizer input").first.input_value()
    assert tokenizer == f"tokenizers/{name}/en_am.model", tokenizer
    expect(page.locator("#train-stop")).to_be_disabled()
    expected = expected_loss_series(finetune)
    assert len(expected) >= 2, expected
    assert_series(drawn_traces(page, "train-loss-plot", len(expected)), expected)
    page.screenshot(path=str(screens / "training.png"), full_page=True)

    open_tab(page, "Jobs")
    select = page.locator("#jobs-select input").first
    expect(select).to_have_value(re.compile(r" · [^·]+ · succeeded · .+ ago$"))
    expect(page.locator("#jobs-table")).to_contain_text(f"{name} · Train the English base model")  # run and stage
    expect(page.locator("#jobs-cancel-btn")).to_be_disabled()
    page.screenshot(path=str(screens / "jobs.png"), full_page=True)

    for tab in ("Tokenizer", "Embeddings", "Inference"):
        open_tab(page, tab)
        page.screenshot(path=str(screens / f"{tab.lower()}.png"), full_page=True)
    open_tab(page, "TensorBoard")
    page.frame_locator("#tensorboard-frame").get_by_text("TensorBoard").first.wait_for(timeout=90_000)
    page.screenshot(path=str(screens / "tensorboard.png"))
    page.close()


ISSUE_49_WORDS = ("base_size", "the `mean` of the rows", "special ids {'bos': 0, 'pad': None}",
                  "Paths are relative to the workspace: /tmp/pytest-1/workspace/runs/x", "Pass --target-size 763",
                  "chatterbox and indextts and chatterbox-turbo have one")
TAB_VISITS = [("Quickstart",), ("Fine-tune a published model",), ("Dataset",), ("Tokenizer", "Train"),
              ("Tokenizer", "Extend"), ("Tokenizer", "Merge (HF)"), ("Tokenizer", "Sweep"), ("Embeddings",),
              ("Training",), ("Inference", "Speech (TTS)"), ("Inference", "Text (LM)"),
              ("Inference", "Compare checkpoints"), ("Quality",), ("Export",), ("Jobs",), ("TensorBoard",)]


def test_no_page_text_uses_an_internal_word(dashboard: AppProcess, browser) -> None:
    """Every tab and sub-tab after the quickstart — its report, the sample dataset's tables, the stage jobs,
    the loaded fine-tune's preflight, the evaluation — shows no job kind, check id, command line, CLI name,
    id with underscores, missing figure or empty bar (INTERNAL_WORDS) outside a closed details fold."""
    report = json.loads(next(dashboard.workspace.glob("runs/*/report.json")).read_text(encoding="utf-8"))
    assert internal_words("Job `x` (quickstart.tts) · memory.batch · mel_loss · CPU seconds — · python -m core x"), \
        "the word list must catch what the issue saw"
    for seen in ISSUE_49_WORDS:  # and what issue 49 saw, each of its kind
        assert internal_words(seen), seen
    page = open_page(browser, dashboard.url)
    expect(page.locator("#qs-report")).to_contain_text("Frozen base rows")
    found: dict[str, list] = {}
    for visit in TAB_VISITS:
        open_tab(page, visit[0])
        for sub in visit[1:]:
            page.get_by_role("tab", name=sub, exact=True).click()
        if visit == ("Dataset",):
            dataset = page.locator("#ds-select input").first
            dataset.fill(f"{report['name']}/sample")
            dataset.press("Enter")
            expect(page.locator("#ds-summary")).to_contain_text("kept")
        if visit == ("Training",):
            expect(page.locator("#preflight-summary")).to_contain_text(re.compile("PASS|FAIL"))
        if visit == ("Jobs",):
            expect(page.locator("#jobs-table")).to_contain_text("succeeded")
        page.wait_for_timeout(1500)  # the tab's own refresh lands
        shown = internal_words(page.locator(".gradio-container").first.inner_text())
        if shown:
            found[" / ".join(visit)] = shown
    assert not found, found
    page.close()


def series_pixels(page, elem_id: str) -> dict[str, int]:
    """Return, for each series drawn in the chart `elem_id`, how many pixels of a screenshot of the chart have
    that series' colour: what a person sees, not what the figure holds."""
    colours = {trace["colour"] for trace in drawn_traces(page, elem_id)}
    shot = page.locator(f"#{elem_id} .js-plotly-plot").first.screenshot()  # scrolled into view first
    pixels = list(Image.open(io.BytesIO(shot)).convert("RGB").getdata())
    counts = {}
    for colour in colours:
        rgb = tuple(int(colour.lstrip("#")[i:i + 2], 16) for i in (0, 2, 4)) if colour.startswith("#") else \
            tuple(int(v) for v in re.findall(r"\d+", colour)[:3])
        counts[colour] = sum(1 for p in pixels if max(abs(a - b) for a, b in zip(p, rgb)) <= 40)
    return counts


def test_charts_draw_each_series_a_person_can_see_after_a_reload(dashboard: AppProcess, browser) -> None:
    """After a reload, the report's validation curve and the Training chart of the finished fine-tune draw
    each series the run's files hold (names, steps and values from the drawn figure), in colours a person
    sees (pixels of each series' colour), and keep them through the live refreshes."""
    report = json.loads(next(dashboard.workspace.glob("runs/*/report.json")).read_text(encoding="utf-8"))
    finetune = Path(report["training"]["finetune_run"])
    page = open_page(browser, dashboard.url)
    page.reload()
    assert_series(drawn_traces(page, "qs-val-plot"), expected_loss_series(finetune, ("val",)))
    val = series_pixels(page, "qs-val-plot")
    assert len(val) >= 1 and all(n >= 100 for n in val.values()), val
    open_tab(page, "Training")
    expected = expected_loss_series(finetune)
    drawn_traces(page, "train-loss-plot", len(expected))
    page.wait_for_timeout(2 * 2000)  # two live refreshes of the chart: the lines must survive them
    assert_series(drawn_traces(page, "train-loss-plot", len(expected)), expected)
    drawn = series_pixels(page, "train-loss-plot")
    assert len(drawn) == 2 and all(n >= 100 for n in drawn.values()), drawn  # training and validation colours
    page.close()


def test_inspect_bars_follow_their_values_and_the_sample_histogram_its_clips(dashboard: AppProcess, browser,
                                                                           screens: Path) -> None:
    """The Tokenizer tab's inspect chart of the quickstart's extended tokenizer on its Amharic text: the bars'
    drawn heights follow their values (the taller bar is the larger share); the Dataset tab's histogram of
    the quickstart's sample counts its manifest's clips per second of duration."""
    workspace = dashboard.workspace
    report = json.loads(next(workspace.glob("runs/*/report.json")).read_text(encoding="utf-8"))
    name = report["name"]
    page = open_page(browser, dashboard.url)
    open_tab(page, "Tokenizer")
    box = page.locator("#tok-inspect-tokenizer input").first
    box.fill(f"tokenizers/{name}/en_am.model")
    box.press("Enter")
    corpus = page.locator("#tok-inspect-corpus input").first
    corpus.fill(f"datasets/{name}/text/am.txt")
    corpus.press("Enter")
    page.locator("#tok-inspect-btn").click()
    [bars] = drawn_traces(page, "tok-inspect-plot")
    assert bars["x"] == ["ids used", "ids never used"] and sum(bars["y"]) == pytest.approx(1.0), bars
    table = page.locator("#tok-report").inner_text()
    unused = float(re.search(r"vocabulary never used\s+([\d.]+)%", table).group(1)) / 100
    assert bars["y"][1] == pytest.approx(unused, abs=0.0006)  # the chart shows the report's number
    heights = page.evaluate(BAR_HEIGHTS, "tok-inspect-plot")
    assert len(heights) == 2 and min(heights) > 0, heights
    assert heights[0] / heights[1] == pytest.approx(bars["y"][0] / bars["y"][1], rel=0.05), (heights, bars["y"])
    page.screenshot(path=str(screens / "tokenizer-inspect.png"), full_page=True)

    open_tab(page, "Dataset")
    dataset = page.locator("#ds-select input").first
    dataset.fill(f"{name}/sample")
    dataset.press("Enter")
    expect(page.locator("#ds-summary")).to_contain_text("kept")
    rows = [json.loads(line) for line in (workspace / "datasets" / name / "sample" / "manifest.jsonl").read_text().splitlines()]
    bins: dict[int, int] = {}
    for row in rows:
        bins[int(row["duration"] // 1)] = bins.get(int(row["duration"] // 1), 0) + 1
    [histogram] = drawn_traces(page, "ds-histogram")
    assert histogram["x"] == [f"{b}-{b + 1} s" for b in sorted(bins)] and histogram["y"] == [bins[b] for b in sorted(bins)]
    page.close()


def test_errors_show_next_to_their_action_in_the_dashboards_words(dashboard: AppProcess, browser) -> None:
    """A failing action shows one message beside its own button; no other component gets an error badge
    or toast; no CLI words; the run config error names the field as labelled and the valid range."""
    page = open_page(browser, dashboard.url)

    open_tab(page, "Tokenizer")
    page.locator("#tok-train-btn").click()
    expect(page.locator("#tok-status")).to_contain_text("Error:")
    open_tab(page, "Inference")
    page.get_by_role("tab", name="Speech (TTS)").click()
    checkpoint = page.locator("#inf-checkpoint input").first
    checkpoint.fill(final_checkpoint(dashboard.workspace))
    checkpoint.press("Enter")
    expect(page.locator("#inf-meta")).to_contain_text("tokenizer")
    page.locator("#inf-tts-btn").click()
    expect(page.locator("#inf-status")).to_have_text("Error: Enter the text to speak.")
    assert page.locator("span.error").count() == 0  # Gradio's red badge on output components
    assert page.locator(".toast-item").count() == 0
    open_tab(page, "Tokenizer")
    assert page.locator("span.error").count() == 0
    assert page.locator("#tok-inspect-status").inner_text().strip() == ""
    shown = page.locator("#tok-status").inner_text()
    assert shown.count("Error:") == 1 and "--" not in shown and "python -m" not in shown, shown

    open_tab(page, "Training")
    batch = page.locator("#train-batch input").first
    batch.fill("0")
    batch.blur()
    expect(page.locator("#preflight-table")).to_contain_text("“Batch size”")
    expect(page.locator("#preflight-table")).to_contain_text("whole number from 1 up")
    expect(page.locator("#train-start")).to_be_disabled()
    page.close()


def dropdown_options(page, elem_id: str, expected: set[str] = frozenset(), timeout_s: float = 30.0) -> list[str]:
    """Return the choices the dropdown `elem_id` offers when a person opens it: once they include
    `expected` (the tab's refresh may still be on its way), else what it offers after `timeout_s`."""
    box = page.locator(f"#{elem_id} input").first
    deadline = time.monotonic() + timeout_s
    while True:
        box.click()
        try:
            page.get_by_role("option").first.wait_for(timeout=10_000)
        except playwright_api.TimeoutError:  # no choice yet: the tab's refresh may still be on its way
            pass
        texts = page.get_by_role("option").evaluate_all("els => els.map(e => e.getAttribute('aria-label') || e.innerText)")
        box.press("Escape")
        offered = [text.strip().splitlines()[-1].strip() for text in texts]
        if expected <= set(offered) or time.monotonic() > deadline:
            return offered
        page.wait_for_timeout(1000)


def test_every_dropdown_lists_what_the_quickstart_made(dashboard: AppProcess, browser) -> None:
    """Every dropdown that takes a tokenizer, manifest or checkpoint offers the quickstart's (at any depth)
    when its tab opens, and Compare shows the evaluated checkpoint without pressing Refresh, with words for
    RTF and DTW identification."""
    report = json.loads(next(dashboard.workspace.glob("runs/*/report.json")).read_text(encoding="utf-8"))
    name = report["name"]
    tokenizers = {f"tokenizers/{name}/en.model", f"tokenizers/{name}/en_am.model"}
    manifest, final = f"datasets/{name}/sample/am.jsonl", final_checkpoint(dashboard.workspace)
    assert final == f"checkpoints/{name}/am.safetensors", final
    wanted = [
        (("Tokenizer",), "tok-inspect-tokenizer", tokenizers),
        (("Tokenizer", "Extend"), "tok-extend-base", tokenizers),
        (("Embeddings",), "emb-checkpoint", {final}),
        (("Embeddings",), "emb-base", tokenizers),
        (("Embeddings",), "emb-new", tokenizers),
        (("Training",), "train-tokenizer", tokenizers),
        (("Training",), "train-manifest", {manifest}),
        (("Training",), "train-checkpoint", {final}),
        (("Inference",), "inf-checkpoint", {final}),
        (("Tokenizer", "Train"), "tok-train-corpus", {f"datasets/{name}/text/am.txt"}),
        (("Fine-tune a published model",), "ft-corpus", {f"datasets/{name}/text/am.txt"}),
    ]
    page = open_page(browser, dashboard.url)
    open_tab(page, "Inference")
    expect(page.locator("#inf-checkpoint input").first).to_have_value(final)  # the newest checkpoint, preselected
    open_tab(page, "Fine-tune a published model")  # the quickstart's Amharic text, preselected
    expect(page.locator("#ft-corpus")).to_contain_text(f"datasets/{name}/text/am.txt")
    for tabs, elem_id, expected in wanted:
        open_tab(page, tabs[0])
        for sub in tabs[1:]:
            page.get_by_role("tab", name=sub, exact=True).click()
        offered = dropdown_options(page, elem_id, expected)
        assert expected <= set(offered), (elem_id, sorted(expected - set(offered)), offered)
        assert not [o for o in offered if o.endswith((".report.json", ".codec.pt", "rejects.jsonl"))], (elem_id, offered)
    open_tab(page, "Inference")
    page.get_by_role("tab", name="Compare checkpoints").click()
    expect(page.locator("#cmp-folder input").first).to_have_value(f"checkpoints/{name}")
    expect(page.locator("#cmp-table")).to_contain_text("am.safetensors")
    words = page.locator("#cmp-words").inner_text()  # the numbers beside it explained in words
    assert "real-time factor" in words and "dynamic time warping" in words, words
    page.get_by_text("Evaluate a checkpoint").click()
    assert final in dropdown_options(page, "cmp-checkpoint", {final})
    page.close()


def test_quality_and_compare_show_the_quickstarts_evaluation(dashboard: AppProcess, browser, screens: Path) -> None:
    """The Quality tab offers and opens the quickstart's evaluation (the newest) by itself, its table lists the
    final checkpoint and its chart draws each measure at the evaluated step; Compare draws MCD and DTW
    identification of the checkpoint with the codec's ceiling, from eval.json's numbers."""
    report = json.loads(next(dashboard.workspace.glob("runs/*/report.json")).read_text(encoding="utf-8"))
    name = report["name"]
    entry = json.loads((dashboard.workspace / "checkpoints" / name / "eval.json").read_text())["checkpoints"]["am.safetensors"]
    model, codec = entry["rows"]["model"], entry["rows"]["codec"]
    page = open_page(browser, dashboard.url)
    open_tab(page, "Quality")
    expect(page.locator("#q-folder input").first).to_have_value(f"checkpoints/{name}")
    expect(page.locator("#q-table")).to_contain_text("am.safetensors")
    traces = {t["name"]: t for t in drawn_traces(page, "q-chart", 2)}
    dtw = traces["sentence identification (DTW)"]
    assert (dtw["x"], dtw["y"]) == ([entry["step"]], [pytest.approx(model["dtw_identification"])]), dtw
    assert traces["failure flags raised"]["y"] == [len(entry["quality"]["flags_raised"])]
    page.screenshot(path=str(screens / "quality.png"), full_page=True)
    open_tab(page, "Inference")
    page.get_by_role("tab", name="Compare checkpoints").click()
    traces = {t["name"]: t for t in drawn_traces(page, "cmp-chart", 4)}
    label = f"am.safetensors (step {entry['step']})"
    mcd = traces["MCD in dB (lower is better)"]
    assert (mcd["type"], mcd["x"], mcd["y"]) == ("bar", [label], [pytest.approx(model["mcd_db"])]), mcd
    assert traces["MCD in dB (lower is better) · codec ceiling"]["y"] == [pytest.approx(codec["mcd_db"])]
    assert traces["sentence identification (DTW)"]["y"] == [pytest.approx(model["dtw_identification"])]
    page.screenshot(path=str(screens / "compare.png"), full_page=True)
    page.close()


CLI_WORDS = ("--", "python -m", "form.", "freeze_until", "freeze.until", "optim.lr")


def test_bad_freeze_index_run_name_and_learning_rate_show_beside_their_field(dashboard: AppProcess, browser) -> None:
    """Each bad value shows its error in plain words right under its own field (not only in the preflight
    table), with no command-line word or internal key, and Start stays disabled until it is fixed."""
    page = open_page(browser, dashboard.url)
    open_tab(page, "Training")
    expect(page.locator("#train-tokenizer input").first).not_to_have_value("")  # the fine-tune's config is loaded
    cases = [
        ("#train-name textarea, #train-name input", "bad/name", "#train-error-name", "Run name", "finetune-ok"),
        ("#train-lr input", "-1", "#train-error-lr", "Learning rate", "0.001"),
        ("#train-freeze-until textarea, #train-freeze-until input", "99999", "#train-error-freeze-until",
         "Freeze rows below", "auto"),
    ]
    for field, bad, error, label, good in cases:
        box = page.locator(field).first
        box.fill(bad)
        box.blur()
        expect(page.locator(error)).to_contain_text(label, timeout=60_000)
        shown = page.locator(error).inner_text()
        assert not any(word in shown for word in CLI_WORDS), shown
        expect(page.locator("#train-start")).to_be_disabled()
        box.fill(good)
        box.blur()
        expect(page.locator(error)).to_have_text("", timeout=60_000)
    page.close()


def test_fields_that_do_not_apply_to_the_family_are_hidden_and_inherited_settings_named(dashboard: AppProcess,
                                                                                     browser) -> None:
    """Switching the loaded LinguaForge fine-tune to Chatterbox hides Model preset and Codec and says which
    inherited model settings (max_speech_tokens) are dropped; switching back shows the fields again."""
    page = open_page(browser, dashboard.url)
    open_tab(page, "Training")
    expect(page.locator("#train-tokenizer input").first).not_to_have_value("")
    codec = page.locator("#train-codec")
    expect(codec).to_be_visible()
    family = page.locator("#train-family input").first
    family.fill("chatterbox")
    family.press("Enter")
    expect(page.locator("#train-family-note")).to_contain_text("max_speech_tokens")
    expect(codec).to_be_hidden()
    expect(page.get_by_label("Model preset")).to_be_hidden()
    family.fill("linguaforge")
    family.press("Enter")
    expect(codec).to_be_visible()
    page.close()


def test_prune_in_the_browser_lists_files_that_download_and_load(dashboard: AppProcess, browser) -> None:
    """The Export tab prunes the fine-tune's training checkpoint as a job and lists the written files; each
    downloads, and the downloaded weights load (safetensors) equal to the training checkpoint's."""
    from core.checkpoint import load_checkpoint

    report = json.loads(next(dashboard.workspace.glob("runs/*/report.json")).read_text(encoding="utf-8"))
    step = next((Path(report["training"]["finetune_run"]) / "checkpoints").glob("step_*.pt"))
    source = str(step.resolve().relative_to(dashboard.workspace.resolve()))
    page = open_page(browser, dashboard.url)
    open_tab(page, "Export")
    dropdown_options(page, "export-checkpoint", {source})
    box = page.locator("#export-checkpoint input").first
    box.fill(source)
    box.press("Enter")
    page.locator("#export-output textarea, #export-output input").first.fill("checkpoints/browser/am.safetensors")
    page.locator("#export-btn").click()
    expect(page.locator("#export-status")).to_contain_text("file(s) written", timeout=300_000)
    links = page.eval_on_selector_all("#export-files a", "els => els.map(e => e.href)")
    names = sorted(Path(href.split("?")[0]).name for href in links)
    assert names == ["am.codec.pt", "am.safetensors", "am.tokenizer.model"], names
    weights = next(href for href in links if href.split("?")[0].endswith("am.safetensors"))
    response = page.request.get(weights)
    assert response.status == 200
    downloaded = dashboard.workspace.parent / "downloaded.safetensors"
    downloaded.write_bytes(response.body())
    pruned, trained = load_checkpoint(downloaded).state_dict, load_checkpoint(step).state_dict
    assert set(pruned) == set(trained) and all((pruned[k] == trained[k]).all() for k in pruned)
    page.close()


CHATTERBOX_INHERITED = {  # a saved Chatterbox run config that still carries a LinguaForge model setting
    "name": "cb-inherited", "family": "chatterbox", "task": "tts", "tokenizer": "tokenizers/am.json",
    "data": {"manifest": "datasets/am/manifest.jsonl"}, "model": {"preset": "tiny", "max_speech_tokens": 600},
}
REFUSAL = ("does not apply to family chatterbox, which takes only model.preset, model.text_tokens_dict_size and "
           "model.dropout (its shape comes from its checkpoint, its vocabulary from the tokenizer)")


def test_preflight_refuses_what_train_refuses_and_names_the_tasks_that_apply(dashboard: AppProcess, browser) -> None:
    """A Chatterbox config loaded into a Chatterbox form keeps its inherited max_speech_tokens (the settings
    view shows it): preflight refuses it with the words `train` refuses it with and Start stays disabled; the
    task lm shows beside Task that Chatterbox trains tts (speech) only."""
    (dashboard.workspace / "presets").mkdir(exist_ok=True)
    (dashboard.workspace / "presets" / "cb-inherited.yaml").write_text(yaml.safe_dump(CHATTERBOX_INHERITED))
    page = open_page(browser, dashboard.url)
    open_tab(page, "Training")
    expect(page.locator("#preflight-summary")).not_to_have_text("")  # the page's own load has filled the form
    family = page.locator("#train-family input").first
    family.fill("chatterbox")
    family.press("Enter")
    expect(page.locator("#train-codec")).to_be_hidden()
    preset = page.locator("#train-preset input").first
    preset.fill("presets/cb-inherited.yaml")
    preset.press("Enter")
    page.locator("#train-load").click()
    expect(page.locator("#train-tokenizer input").first).to_have_value("tokenizers/am.json")
    expect(page.locator("#preflight-table")).to_contain_text(REFUSAL)
    expect(page.locator("#preflight-summary")).to_contain_text("FAIL")
    expect(page.locator("#train-start")).to_be_disabled()
    shown = page.locator("#preflight-table").inner_text()
    assert "“model.max_speech_tokens”" in shown and "form." not in shown and "python -m" not in shown, shown
    page.get_by_text("Every setting this run starts with").click()
    expect(page.locator("#train-settings")).to_contain_text("max_speech_tokens: 600")
    expect(page.locator("#train-settings")).to_contain_text("tokenizer: tokenizers/am.json")  # checked what Load filled in

    page.locator("#train-task").get_by_text("lm", exact=True).click()
    expect(page.locator("#train-error-task")).to_contain_text("family chatterbox trains task tts only")
    expect(page.locator("#train-error-task")).to_contain_text("Set “Task” to tts (speech).")
    page.locator("#train-task").get_by_text("tts", exact=True).click()
    expect(page.locator("#train-error-task")).to_have_text("")
    expect(page.locator("#preflight-table")).to_contain_text(REFUSAL)
    page.close()


def test_a_failed_training_jobs_reason_shows_beside_start(dashboard: AppProcess, browser) -> None:
    """A train job submitted outside the form (`jobs submit`) with that config fails in the worker; the
    Training tab watches it and shows its reason under Start, in the dashboard's words."""
    config = dashboard.workspace / "runs" / "cb-job" / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(yaml.safe_dump({**CHATTERBOX_INHERITED, "name": "cb-job"}))
    submitted = subprocess.run(
        [sys.executable, "-m", "core", "jobs", "submit", "train", "--param", "config=runs/cb-job/config.yaml", "--json"],
        cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=300,
        env={**os.environ, "LINGUAFORGE_WORKSPACE": str(dashboard.workspace)})
    assert submitted.returncode == 0, submitted.stderr
    job_id = json.loads(submitted.stdout)["id"]
    page = open_page(browser, dashboard.url)
    open_tab(page, "Training")
    expect(page.locator("#train-job input, #train-job textarea").first).to_have_value(job_id)
    error = page.locator("#train-job-error")
    expect(error).to_contain_text(f"Job {job_id} failed:", timeout=120_000)
    expect(error).to_contain_text(REFUSAL)
    assert "python -m" not in error.inner_text(), error.inner_text()
    assert page.locator("#train-job-error").bounding_box()["y"] - page.locator("#train-start").bounding_box()["y"] < 200
    page.close()


def final_checkpoint(workspace: Path) -> str:
    """Return the workspace-relative path of the quickstart's final checkpoint."""
    report = json.loads(next(workspace.glob("runs/*/report.json")).read_text(encoding="utf-8"))
    return str(Path(report["checkpoint"]).resolve().relative_to(workspace.resolve()))


def core_cli(workspace: Path, *args: str) -> dict:
    """Run `python -m core ARGS --json` against `workspace`; return its JSON output (fail with its stderr)."""
    done = subprocess.run([sys.executable, "-m", "core", *args, "--json"], cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "LINGUAFORGE_WORKSPACE": str(workspace)})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_export_refuses_a_second_write_and_what_would_fail_and_keeps_a_typed_output(dashboard: AppProcess,
                                                                                     browser) -> None:
    """A training job holds the one GPU slot, so a prune written from page A stays queued as long as the test
    needs: page A's button is disabled and its panel names that job; the output typed on page A survives
    switching to Export and back; on page B an output named like a file, an export of LinguaForge's own
    checkpoint and a second Write are each refused in words before anything is submitted, and B's panel
    never shows A's job. Once the slot is free, A's panel lists A's files and B's still nothing."""
    workspace = dashboard.workspace
    report = json.loads(next(workspace.glob("runs/*/report.json")).read_text(encoding="utf-8"))
    finetune = Path(report["training"]["finetune_run"])
    source = str(next((finetune / "checkpoints").glob("step_*.pt")).resolve().relative_to(workspace.resolve()))
    config = yaml.safe_load((finetune / "config.yaml").read_text())
    config.update(name="hold-slot", schedule={**config["schedule"], "max_steps": 100_000, "val_every": 100_000,
                                              "save_every": 100_000})
    (workspace / "runs" / "hold-slot").mkdir(parents=True)
    (workspace / "runs" / "hold-slot" / "config.yaml").write_text(yaml.safe_dump(config))
    hold = core_cli(workspace, "jobs", "submit", "train", "--param", "config=runs/hold-slot/config.yaml")["id"]
    store = JobStore(workspace / "jobs.sqlite")
    deadline = time.monotonic() + 300
    while store.get(hold)["status"] != "running":
        assert store.get(hold)["status"] == "queued" and time.monotonic() < deadline, store.get(hold)
        time.sleep(1)

    def export_page(output: str):
        page = open_page(browser, dashboard.url)
        open_tab(page, "Export")
        box = page.locator("#export-checkpoint input").first
        box.fill(source)
        box.press("Enter")
        page.locator("#export-output textarea, #export-output input").first.fill(output)
        return page

    try:
        first = export_page("checkpoints/held/am.safetensors")
        output = first.locator("#export-output textarea, #export-output input").first
        first.locator("#export-mode label").nth(1).click()  # Export …
        first.locator("#export-mode label").nth(0).click()  # … and back to Prune: the typed output stays
        first.wait_for_timeout(1500)
        expect(output).to_have_value("checkpoints/held/am.safetensors")
        first.locator("#export-btn").click()
        expect(first.locator("#export-status")).to_contain_text("queued")
        expect(first.locator("#export-btn")).to_be_disabled()
        written = [job for job in store.list() if job["kind"] == "prune" and job["status"] == "queued"]
        assert len(written) == 1, written
        held_id = written[0]["id"]
        expect(first.locator("#export-status")).to_contain_text(held_id)

        second = export_page("checkpoints/second/am.safetensors")
        second.locator("#export-mode label").nth(1).click()  # Export, into a name with a file's suffix
        second.locator("#export-output textarea, #export-output input").first.fill("exports/model.safetensors")
        second.locator("#export-btn").click()
        expect(second.locator("#export-message")).to_contain_text("names a file")
        second.locator("#export-output textarea, #export-output input").first.fill("exports/model")
        second.locator("#export-btn").click()
        expect(second.locator("#export-message")).to_contain_text("no published layout to export to")
        expect(second.locator("#export-message")).to_contain_text("Choose Prune instead")
        second.locator("#export-mode label").nth(0).click()
        second.locator("#export-output textarea, #export-output input").first.fill("checkpoints/second/am.safetensors")
        second.locator("#export-btn").click()
        expect(second.locator("#export-message")).to_contain_text(f"(job {held_id}) was queued when you clicked")
        assert second.locator("#export-status").inner_text().strip() == ""
        assert second.locator("#export-files a").count() == 0
        assert [job["id"] for job in store.list() if job["kind"] in ("prune", "export")
                and job["created_at"] > written[0]["created_at"] - 1] == [held_id]  # nothing else was submitted
    finally:
        core_cli(workspace, "jobs", "cancel", hold)
    expect(first.locator("#export-status")).to_contain_text("file(s) written", timeout=300_000)
    expect(first.locator("#export-status")).to_contain_text(held_id)
    names = sorted(Path(href.split("?")[0]).name for href in
                   first.eval_on_selector_all("#export-files a", "els => els.map(e => e.href)"))
    assert names == ["am.codec.pt", "am.safetensors", "am.tokenizer.model"], names
    expect(first.locator("#export-btn")).to_be_enabled()
    first.wait_for_timeout(2000)
    assert second.locator("#export-status").inner_text().strip() == "" and second.locator("#export-files a").count() == 0
    first.close()
    second.close()

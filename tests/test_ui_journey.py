"""The dashboard as a user lives in it: a reduced TTS quickstart started from the Quickstart tab, followed
by the page that pressed Run and by a second page opened mid-run, then every tab looked at afterwards.

The real app.py (worker, TensorBoard, Gradio) in Debian chromium through Playwright. What the pages
showed is recorded in the page itself (a MutationObserver installed before the page loads) and
asserted after the run, so no assertion depends on catching an intermediate value. Screenshots of
every tab go to $LINGUAFORGE_SCREENSHOT_DIR (the README's pictures in docs/images/ come from it),
else to a temporary folder.
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

from tests.browser_helpers import CHROMIUM_ARGS, AppProcess, chromium_path, running_app
from jobs.records import JobStore

pytestmark = [pytest.mark.browser, pytest.mark.slow]
playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect
expect.set_options(timeout=60_000)  # a slow shared machine: generous waits, never fixed sleeps

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
  setInterval(() => {  // what a person reads every second: the bar's value and the job's status line
    const status = document.querySelector('#qs-status');
    if (bar() && status) window.__lf.samples.push([Number(bar().getAttribute('aria-valuenow')), status.textContent]);
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


def open_page(browser, url: str):
    """Return a new page at `url` that records what the Quickstart tab shows (see RECORDER)."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(60_000)
    page.add_init_script(RECORDER)
    page.goto(url)
    page.get_by_role("tab", name="Quickstart").wait_for()
    return page


def open_tab(page, name: str) -> None:
    """Click the top-level tab `name`."""
    page.get_by_role("tab", name=name, exact=True).first.click()


def quickstart_jobs(workspace: Path) -> list[dict]:
    """Return the quickstart job records of the workspace (newest first)."""
    return [job for job in JobStore(workspace / "jobs.sqlite").list() if job["kind"].startswith("quickstart.")]


def line_points(points: str) -> int:
    """Return the number of points of an SVG polyline's `points` attribute."""
    return len(points.split())


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
        "() => { const s = window.__lf.samples; return s.length > 0 && s[s.length - 1][1].includes('succeeded'); }")
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


def test_quickstart_progress_read_every_second_never_decreases_and_is_below_100_until_the_end() -> None:
    """Read every second during the journey: the bar never goes back, is below 100% while the job has not
    succeeded (the report is written before it does), and moves through the later stages instead of
    jumping to the end; the status line above it carries no second progress figure; no ETA was a guess
    from the first seconds."""
    samples = JOURNEY_SEEN.get("samples")
    assert samples, "the quickstart test did not record the journey"
    values = [value for value, _ in samples]
    assert values == sorted(values), f"progress went backwards: {values}"
    early = [(value, status) for value, status in samples if "succeeded" not in status]
    assert early and all(value < 1.0 for value, _ in early), early
    assert any(0.6 < value < 1.0 for value, _ in early), values  # the last stages are seen, not skipped
    assert values[-1] == 1.0 and "succeeded" in samples[-1][1], samples[-1]
    assert not [status for _, status in samples if "%" in status], samples  # one progress line: the box's, not two
    etas = [re.search(r"ETA (\d+)h", text) for text in JOURNEY_SEEN["text"]]
    assert not any(etas), JOURNEY_SEEN["text"]  # a reduced journey takes minutes: no ETA in hours


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
    rows = [json.loads(line) for line in (finetune / "metrics.jsonl").read_text().splitlines()]
    expected = sorted(sum(1 for row in rows if row.get("split", "train") == split and isinstance(row.get(metric), float))
                      for split in ("train", "val") for metric in ("loss", "text_loss", "mel_loss"))
    expected = [n for n in expected if n]
    paths = page.locator("#train-loss-plot polyline.lf-series")
    page.wait_for_function(
        "n => document.querySelectorAll('#train-loss-plot polyline.lf-series').length >= n", arg=len(expected),
        timeout=90_000)
    drawn = sorted(line_points(d) for d in paths.evaluate_all("els => els.map(e => e.getAttribute('points'))"))
    assert drawn == expected, (drawn, expected)
    page.screenshot(path=str(screens / "training.png"), full_page=True)

    open_tab(page, "Jobs")
    select = page.locator("#jobs-select input").first
    expect(select).to_have_value(re.compile(r" · \S+ · succeeded · .+ ago$"))
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


def series_pixels(page, selector: str) -> dict[str, int]:
    """Return, for each line drawn in the chart `selector`, how many pixels of a screenshot of the plot
    area (the lines' own box) have that line's colour: what a person sees, not what the DOM holds."""
    strokes = page.locator(f"{selector} polyline.lf-series").evaluate_all(
        "els => els.map(e => getComputedStyle(e).stroke)")
    shot = page.locator(f"{selector} .lf-plot-area").first.screenshot()  # scrolled into view first
    image = Image.open(io.BytesIO(shot)).convert("RGB")
    pixels = list(image.getdata())
    counts = {}
    for stroke in strokes:
        rgb = tuple(int(v) for v in re.findall(r"\d+", stroke)[:3])
        assert len(rgb) == 3, f"a line without a colour: {stroke!r}"
        counts[stroke] = sum(1 for p in pixels if max(abs(a - b) for a, b in zip(p, rgb)) <= 40)
    return counts


def test_charts_draw_coloured_lines_with_a_legend_after_a_reload(dashboard: AppProcess, browser) -> None:
    """After a reload, the Training chart of the finished fine-tune and the report's validation curve show
    lines a person can see: pixels of each series' colour inside the plot area, and the series in the legend."""
    page = open_page(browser, dashboard.url)
    page.reload()
    expect(page.locator("#qs-val-plot polyline.lf-series").first).to_be_attached(timeout=90_000)
    val = series_pixels(page, "#qs-val-plot")
    assert len(val) == 2 and all(n >= 20 for n in val.values()), val
    assert "val mel_loss" in page.locator("#qs-val-plot").inner_text()
    open_tab(page, "Training")
    expect(page.locator("#train-loss-plot polyline.lf-series").first).to_be_attached(timeout=90_000)
    page.wait_for_timeout(2 * 2000)  # two live refreshes of the chart: the lines must survive them
    drawn = series_pixels(page, "#train-loss-plot")
    assert len(drawn) >= 2 and all(n >= 20 for n in drawn.values()), drawn
    legend = page.locator("#train-loss-plot").inner_text()
    assert "train loss" in legend and "val mel_loss" in legend, legend
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
    ]
    page = open_page(browser, dashboard.url)
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
REFUSAL = ("does not apply to family chatterbox, which takes only model.preset and model.text_tokens_dict_size "
           "(its shape comes from its checkpoint, its vocabulary from the tokenizer)")


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

"""Uploads in a real browser (real app.py, Debian chromium through Playwright), with the settings' upload
limit set to 1 MB: an LJSpeech zip and a loose manifest with its clips land in the workspace's uploads/ and
import; a text corpus lands in corpora/ and is offered; a model folder lands in models/ and is chosen; an
upload over the limit, a zip member or a name leading outside the workspace are refused in words and
write nothing."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from tests.browser_helpers import AppProcess, choose, chromium_page, chromium_path, open_tab, running_app
from tests.data_helpers import make_espeak_dataset
from tests.test_ui_dashboard import fill

pytestmark = [pytest.mark.browser, pytest.mark.slow]
playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect
expect.set_options(timeout=60_000)

LIMIT_MB = 1
OUTCOME = """old => {  // the import's status line shows this click's outcome: a refusal, or a new job that ended
  const t = document.querySelector('#ds-import-status').innerText.trim();
  const job = text => (text.match(/job ([0-9a-f]{12})/) || [])[1];
  if (t === '' || t === old.trim()) return false;
  return t.startsWith('Error') && !job(t) ? true : job(t) !== job(old) && !/: (queued|running)/.test(t);
}"""


@pytest.fixture(scope="module")
def clips(module_tmp: Path) -> Path:
    """Six espeak clips of English with their manifest (made once for the module)."""
    return make_espeak_dataset(module_tmp / "clips", per_language=3, languages=("en",)).parent


@pytest.fixture(scope="module")
def dashboard(module_tmp: Path, clips: Path) -> Iterator[AppProcess]:
    """The real app for an empty workspace, its uploads limited to LIMIT_MB."""
    chromium_path()
    settings = module_tmp / "settings.yaml"
    settings.write_text(yaml.safe_dump({"ui": {"upload_limit_mb": LIMIT_MB}}))
    with running_app(module_tmp / "workspace", module_tmp / "app.log", config=settings) as app:
        yield app


@pytest.fixture(scope="module")
def page(dashboard: AppProcess):
    """One chromium page for the module's tests, on the Dataset tab."""
    with chromium_page(dashboard.url, "Dataset", height=1100) as tab:
        yield tab


def ljspeech_zip(clips: Path, target: Path, folder: str = "ljs") -> Path:
    """Write the clips as an LJSpeech folder (metadata.csv and wavs/) zipped inside the top folder `folder`."""
    rows = [json.loads(line) for line in (clips / "manifest.jsonl").read_text().splitlines()]
    with zipfile.ZipFile(target, "w") as archive:
        archive.writestr(f"{folder}/metadata.csv", "".join(f"{Path(r['audio']).stem}|{r['text']}\n" for r in rows))
        for row in rows:
            archive.write(clips / row["audio"], f"{folder}/wavs/{Path(row['audio']).name}")
    return target


def import_uploaded(page, fmt: str, name: str, files: list[Path]) -> None:
    """Choose `fmt` and the dataset `name`, drop `files` on the Dataset tab's upload and press Import; return
    once the import's status line shows something new (this click's outcome, not the last one's)."""
    open_tab(page, "Dataset")
    before = page.locator("#ds-import-status").inner_text()
    choose(page, "ds-format", fmt)
    fill(page, "ds-name", name)
    page.locator("#ds-filter input").uncheck()  # espeak clips of 3 words: the rate filter is not the point here
    page.locator("#ds-upload input[type=file]").set_input_files([str(f) for f in files])
    expect(page.locator("#ds-upload")).to_contain_text(files[0].stem)
    page.locator("#ds-import-btn").click()
    page.wait_for_function(OUTCOME, arg=before, timeout=300_000)


def test_an_ljspeech_zip_and_a_loose_manifest_land_in_the_workspace_and_import(page, dashboard: AppProcess,
                                                                              clips: Path, tmp_path: Path) -> None:
    workspace = dashboard.workspace
    import_uploaded(page, "ljspeech", "ljs", [ljspeech_zip(clips, tmp_path / "ljs.zip")])
    expect(page.locator("#ds-import-status")).to_contain_text("succeeded", timeout=300_000)
    assert sorted(p.name for p in (workspace / "uploads" / "ljs" / "ljs" / "wavs").iterdir()) == \
        sorted(p.name for p in (clips / "audio").iterdir())
    assert len((workspace / "datasets" / "ljs" / "manifest.jsonl").read_text().splitlines()) == 3
    page.locator("#ds-upload button[aria-label='Clear']").first.click()

    rows = [json.loads(line) for line in (clips / "manifest.jsonl").read_text().splitlines()]
    (tmp_path / "loose").mkdir()
    (tmp_path / "loose" / "manifest.jsonl").write_text("".join(
        json.dumps({**r, "audio": Path(r["audio"]).name}) + "\n" for r in rows))
    import_uploaded(page, "manifest", "loose", [tmp_path / "loose" / "manifest.jsonl",
                                                *sorted((clips / "audio").iterdir())])
    expect(page.locator("#ds-import-status")).to_contain_text("succeeded", timeout=300_000)
    assert (workspace / "uploads" / "loose" / "manifest.jsonl").is_file()
    assert len((workspace / "datasets" / "loose" / "manifest.jsonl").read_text().splitlines()) == 3
    page.locator("#ds-upload button[aria-label='Clear']").first.click()


def test_over_the_limit_or_outside_the_workspace_is_refused_and_writes_nothing(page, dashboard: AppProcess,
                                                                                 tmp_path: Path) -> None:
    """Too large unpacked, a member leading out, a damaged zip, a name leading out, one file over the limit:
    each refused in one line on the page, nothing written in uploads/ or outside."""
    workspace = dashboard.workspace
    before = sorted(str(p.relative_to(workspace.parent)) for p in workspace.parent.rglob("*"))
    bomb = tmp_path / "big.zip"  # 2 MB of silence packs into a few KB: the limit is on what it unpacks to
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("metadata.csv", "a|x\n")
        archive.writestr("wavs/a.wav", bytes(2 * 1024 * 1024))
    import_uploaded(page, "ljspeech", "big", [bomb])
    expect(page.locator("#ds-import-status")).to_contain_text(f"over the {LIMIT_MB:.1f} MB limit")
    page.locator("#ds-upload button[aria-label='Clear']").first.click()

    escape = tmp_path / "escape.zip"
    with zipfile.ZipFile(escape, "w") as archive:
        archive.writestr("metadata.csv", "a|x\n")
        archive.writestr("../../outside.wav", b"RIFF")
    import_uploaded(page, "ljspeech", "escape", [escape])
    expect(page.locator("#ds-import-status")).to_contain_text("not a plain file name")
    page.locator("#ds-upload button[aria-label='Clear']").first.click()

    damaged = tmp_path / "damaged.zip"  # the fourth audit's "internal error: Bad CRC-32", its first member left behind
    with zipfile.ZipFile(damaged, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("metadata.csv", "a|x\n")
        archive.writestr("wavs/a.wav", bytes(range(256)) * 8)
    raw = bytearray(damaged.read_bytes())
    at = raw.index(b"wavs/a.wav") + 200
    raw[at:at + 8] = b"\xff" * 8
    damaged.write_bytes(bytes(raw))
    import_uploaded(page, "ljspeech", "damaged", [damaged])
    expect(page.locator("#ds-import-status")).to_contain_text("The upload is damaged (Bad CRC-32")
    expect(page.locator("#ds-import-status")).not_to_contain_text("internal error")
    page.locator("#ds-upload button[aria-label='Clear']").first.click()

    small = tmp_path / "metadata.csv"
    small.write_text("a|x\n")
    import_uploaded(page, "ljspeech", "../outside", [small])
    expect(page.locator("#ds-import-status")).to_contain_text("not a name")
    page.locator("#ds-upload button[aria-label='Clear']").first.click()

    big = tmp_path / "big.wav"  # one file over the limit: refused when it is dropped, before it is sent
    big.write_bytes(bytes(LIMIT_MB * 1024 * 1024 + 1))
    open_tab(page, "Dataset")
    page.locator("#ds-upload input[type=file]").set_input_files(str(big))
    expect(page.get_by_text(re.compile("exceed the maximum allowed size of 1.0 Mb")).first).to_be_visible()
    after = sorted(str(p.relative_to(workspace.parent)) for p in workspace.parent.rglob("*"))
    assert not [p for p in set(after) - set(before) if "uploads" in p or "outside" in p], sorted(set(after) - set(before))


def test_a_corpus_and_a_model_folder_are_uploaded_offered_and_chosen(page, dashboard: AppProcess,
                                                                       tmp_path: Path) -> None:
    workspace = dashboard.workspace
    corpus = tmp_path / "am_news.txt"
    corpus.write_text("ሰላም ለዓለም።\nእንደምን አደራችሁ።\n", encoding="utf-8")
    open_tab(page, "Tokenizer")
    with page.expect_file_chooser() as chooser:
        page.locator("#tok-upload").click()
    chooser.value.set_files(str(corpus))
    expect(page.locator("#tok-upload-status")).to_contain_text("corpora/am_news.txt")
    assert (workspace / "corpora" / "am_news.txt").read_text(encoding="utf-8") == corpus.read_text(encoding="utf-8")
    page.locator("#tok-train-corpus input").first.click()
    expect(page.get_by_role("option", name="corpora/am_news.txt")).to_be_visible()
    page.locator("#tok-train-corpus input").first.press("Escape")
    with page.expect_file_chooser() as chooser:  # the same name again: nothing is overwritten
        page.locator("#tok-upload").click()
    chooser.value.set_files(str(corpus))
    expect(page.locator("#tok-upload-status")).to_contain_text("exists already")

    weights = tmp_path / "t3_mtl23ls_v2.safetensors"  # a Chatterbox folder's marker file (the rest is missing)
    weights.write_bytes(b"not real weights")
    open_tab(page, "Fine-tune a published model")
    with page.expect_file_chooser() as chooser:
        page.locator("#ft-folder-upload").click()
    chooser.value.set_files(str(weights))
    expect(page.locator("#ft-folder-status")).to_contain_text("models/chatterbox")
    expect(page.locator("#ft-folder input").first).to_have_value("models/chatterbox")
    assert (workspace / "models" / "chatterbox" / weights.name).read_bytes() == b"not real weights"
    page.locator("#ft-check-btn").click()
    expect(page.locator("#ft-folder-status")).to_contain_text("lacks")  # checked: the chosen folder, not "choose one"

"""The fourth audit's findings (issue 48), each with its repro: answered in one line (exit 2, an InputError, a
4xx), nothing written or left behind, nothing outside the roots touched, the input intact."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Iterator

import pytest

from core.cli import main as cli_main
from core.errors import InputError


def _one_error(capsys: pytest.CaptureFixture) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in err, err
    return lines[0]


def _exit_code(argv: list[str]) -> int:
    """Run `python -m core ARGV` in this process; return its exit code (a refused option exits in the parser)."""
    try:
        return cli_main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def _tree(folder: Path) -> dict[str, bytes | str]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else "dir" for p in sorted(folder.rglob("*"))}


@pytest.fixture
def runner(workspace: Path):
    """A real job runner (SQLite queue) of the test's workspace; no worker runs its jobs."""
    from core.cli.catalogue import cli_catalogue
    from core.config import load_settings
    from jobs.runner import JobRunner

    return JobRunner(load_settings(), catalogue=cli_catalogue())


# ------------------------------------------------------------------ 2 and 9: every value that becomes part of a path


ESCAPE = "../../../../outside/esc_job2"


@pytest.mark.parametrize("argv", [
    ["eval", "tts", "--checkpoint", "c.pt", "--sentences", "s.txt", "--base-language", ESCAPE],
    ["eval", "tts", "--checkpoint", "c.pt", "--sentences", "s.txt", "--language", "en/../../x"],
    ["dataset", "sample", "--output", "out", "--languages", f"en,{ESCAPE}"],
    ["dataset", "import", "--format", "folder", "--input", "in", "--output", "out", "--language", "am\n"],
    ["synthesize", "--checkpoint", "c.pt", "--text", "hi", "--output", "o.wav", "--language", ".."],
    ["export", "--checkpoint", "c.pt", "--output", "out", "--name", "a/b"],
    ["quickstart", "tts", "--name", "qs\n"],
])
def test_a_value_that_becomes_part_of_a_path_is_one_name(workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture, argv: list[str]) -> None:
    """The audit's `--base-language ../../../../outside/esc_job2` wrote outside/esc_job2/00N.wav; a language code,
    an export name or a run name with a separator, `..` or a final newline is refused by the parser."""
    monkeypatch.chdir(workspace)
    assert _exit_code(argv) == 2
    line = _one_error(capsys)
    assert "not a name" in line, line
    assert not any(workspace.iterdir()) and sorted(p.name for p in tmp_path.iterdir()) == ["workspace"]


def test_a_job_with_a_language_leaving_the_roots_is_refused(workspace: Path, runner) -> None:
    """The audit's job: eval.tts with base_language=../../../../outside/esc_job2 was accepted; a quickstart job
    named `qs\\n` ran three stages and left runs/'qs\\n'."""
    with pytest.raises(InputError, match="base-language: language code '../../../../outside/esc_job2': not a name"):
        runner.submit("eval.tts", {"checkpoint": "c.pt", "sentences": "s.txt", "base_references": "refs3",
                                   "base_language": ESCAPE})
    with pytest.raises(InputError, match=r"'qs\\n': not a name"):
        runner.submit("quickstart.tts", {"name": "qs\n"})
    assert runner.list_jobs() == []


def test_the_name_rule_is_anchored_at_the_end() -> None:
    """`$` matched before a final newline: `nl2\\n` was a name. Every name-like rule now matches the whole value."""
    from core.confine import is_name
    from core.data.shards import parse_devices, parse_shard
    from core.uploads import check_member

    assert is_name("nl2") and not is_name("nl2\n") and not is_name("nl2\r") and not is_name("a\x00")
    with pytest.raises(InputError):
        check_member("clip.wav\n", "member")
    with pytest.raises(InputError):
        parse_shard("0/2\n/3")
    assert parse_shard("1/2").count == 2 and parse_devices("cpu,cpu") == ["cpu", "cpu"]


def test_a_run_config_named_with_a_newline_is_refused(workspace: Path, capsys: pytest.CaptureFixture) -> None:
    """The audit's run `"nl2\\n"` trained; `train --config` now refuses its name before any work."""
    import yaml

    from tests.trainer_helpers import lm_config, lm_workspace

    lm_workspace(workspace)
    path = lm_config(workspace, name="nl2")
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    path.write_text(yaml.safe_dump({**config, "name": "nl2\n"}), encoding="utf-8")
    before = _tree(workspace)
    assert _exit_code(["train", "--config", str(path)]) == 2
    assert r"'nl2\n': not a name" in _one_error(capsys)
    assert _tree(workspace) == before


# ------------------------------------------------------------------ 8 and 11: every count and size option bounded


@pytest.mark.parametrize("argv, bound", [
    (["preprocess", "--devices", ",".join(["cpu"] * 64)], "at most 16"),
    (["preprocess", "--shard", "0/99999999999999999999999"], "N ≤ 100,000"),
    (["doctor", "--device-memory", "1e30GiB"], "at most 1PiB"),
    (["train", "--config", "c.yaml", "--device-memory", "1e30GiB"], "at most 1PiB"),
])
def test_counts_and_sizes_are_bounded_and_the_bound_is_in_the_help(workspace: Path, capsys: pytest.CaptureFixture,
                                                                    argv: list[str], bound: str) -> None:
    assert _exit_code(argv) == 2
    assert bound in _one_error(capsys)
    with pytest.raises(SystemExit):
        cli_main([argv[0], "--help"])
    assert bound in " ".join(capsys.readouterr().out.split())
    assert not any(workspace.iterdir())


def test_a_job_with_64_devices_is_refused(workspace: Path, runner) -> None:
    """The audit's job with the same value as `preprocess --devices cpu×64` was accepted."""
    with pytest.raises(InputError, match="64 devices: one process is started per device, at most 16"):
        runner.submit("preprocess", {"manifest": "m.jsonl", "devices": ",".join(["cpu"] * 64)})
    with pytest.raises(InputError, match="at most 1PiB"):
        runner.submit("train", {"config": "c.yaml", "device_memory": "1e30GiB"})


# ------------------------------------------------------------------ 1: one writer for every output


def test_a_stream_part_linked_to_the_reference_is_refused_before_any_work(workspace: Path, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture) -> None:
    """The audit's repro: `W/out6/hl.wav.part` hard-linked to the reference voice took the voice from 111,950 to
    44 bytes. The output guard knows the side file: one line, exit 2, the voice intact (hard link or symlink)."""
    import os

    from tests.serve_helpers import write_voice

    voice = workspace / "voices" / "anna.wav"
    write_voice(voice)
    checkpoint = workspace / "checkpoints" / "t3.safetensors"
    checkpoint.parent.mkdir()
    checkpoint.write_bytes(b"not loaded: the guard refuses first")
    out = workspace / "out6"
    out.mkdir()
    before = voice.read_bytes()
    for link in (os.link, os.symlink):
        part = out / "hl.wav.part"
        part.unlink(missing_ok=True)
        link(voice, part)
        argv = ["synthesize", "--family", "chatterbox", "--checkpoint", str(checkpoint), "--text", "hi",
                "--reference", str(voice), "--output", str(out / "hl.wav"), "--stream"]
        assert _exit_code(argv) == 2
        line = _one_error(capsys)
        assert "hl.wav.part" in line and "it would overwrite the input --reference" in line, line
        assert voice.read_bytes() == before and sorted(p.name for p in out.iterdir()) == ["hl.wav.part"]


@pytest.mark.parametrize("link", ["symlink", "hardlink", "stale"])
def test_a_growing_wav_never_writes_through_what_holds_its_part_name(tmp_path: Path, link: str) -> None:
    """The audit's symlink `.part` to a file outside: that file held the wav afterwards (exit 0). The writer
    replaces whatever holds the name — link or stale file — as a directory entry, never writing through it."""
    import os

    import soundfile as sf
    import torch

    from core.audio_formats import GrowingWav

    outside = tmp_path / "outside" / "keep.bin"
    outside.parent.mkdir()
    outside.write_bytes(b"outside the roots" * 100)
    out = tmp_path / "ws" / "out6"
    out.mkdir(parents=True)
    part = out / "hl.wav.part"
    if link == "symlink":
        part.symlink_to(outside)
    elif link == "hardlink":
        os.link(outside, part)
    else:
        part.write_bytes(b"an interrupted stream's leftover")
    wav = GrowingWav(out / "hl.wav", 16000)
    for _ in range(3):
        wav.write(torch.full((800,), 0.25))
    assert wav.close() == out / "hl.wav"
    assert outside.read_bytes() == b"outside the roots" * 100 and outside.stat().st_nlink == 1
    samples, rate = sf.read(str(out / "hl.wav"))
    assert rate == 16000 and len(samples) == 2400 and abs(samples.mean() - 0.25) < 1e-3
    assert sorted(p.name for p in out.iterdir()) == ["hl.wav"] and not (out / "hl.wav").is_symlink()


def test_the_fixed_name_writers_never_write_through_a_link(tmp_path: Path) -> None:
    """`replace_bytes` (imported clips, cache items) and the progress file wrote through a temporary name a
    link could hold (`.<name>.<pid>.tmp`, `<name>.tmp`): they now take a fresh temporary name each time."""
    import os

    from core.fsutil import replace_bytes
    from core.progress import write_progress_file

    outside = tmp_path / "outside.txt"
    outside.write_text("mine", encoding="utf-8")
    target = tmp_path / "ws" / "progress.json"
    target.parent.mkdir()
    for name in (f".progress.json.{os.getpid()}.tmp", "progress.json.tmp"):
        (target.parent / name).symlink_to(outside)
    write_progress_file({"step": 3}, str(target))
    replace_bytes(target.parent / "clip.wav", b"RIFF")
    assert outside.read_text(encoding="utf-8") == "mine"
    assert target.read_text(encoding="utf-8") == '{"step": 3}' and (target.parent / "clip.wav").read_bytes() == b"RIFF"


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_an_append_never_reaches_a_file_through_a_link(tmp_path: Path, link: str) -> None:
    """Logs, metrics and journals are appended to (not created new): `open_append` refuses a name held by a
    symlink or by a file with other hard links, naming it, and the file elsewhere keeps its bytes."""
    import os

    from core.fsutil import open_append

    outside = tmp_path / "outside.txt"
    outside.write_text("mine", encoding="utf-8")
    run_dir = tmp_path / "runs" / "r"
    run_dir.mkdir(parents=True)
    metrics = run_dir / "metrics.jsonl"
    metrics.symlink_to(outside) if link == "symlink" else os.link(outside, metrics)
    with pytest.raises(OSError, match="LinguaForge appends only to its own files") as refused:
        open_append(metrics)
    assert refused.value.filename == str(metrics)
    with open_append(run_dir / "log.txt") as handle:  # a name of its own: appended as before
        handle.write("one\n")
    assert (run_dir / "log.txt").read_text(encoding="utf-8") == "one\n" and outside.read_text(encoding="utf-8") == "mine"


# ------------------------------------------------------------------ 3, 6, 7: every structured reader bounded

DEEP = "[" * 100_000


def _deep_files(root: Path) -> dict[str, list[str]]:
    """Write one deeply nested file per reader the audit crashed; return the command reading each."""
    import json

    files = {"manifest.jsonl": DEEP + "\n", "run.yaml": f"name: deep\nmodel: {DEEP}\n", "tok.json": '{"model": ' + DEEP,
             "settings.yaml": f"workspace: {DEEP}\n"}
    for name, text in files.items():
        (root / name).write_text(text, encoding="utf-8")
    hf = root / "hf"
    hf.mkdir()
    (hf / "state.json").write_text('{"_data_files": ' + DEEP, encoding="utf-8")
    (hf / "dataset_info.json").write_text(json.dumps({"features": {}}), encoding="utf-8")
    return {"manifest.jsonl": ["corpus", "collect", "--manifest", str(root / "manifest.jsonl"), "--output",
                               str(root / "out" / "corpus.txt")],
            "run.yaml": ["train", "--config", str(root / "run.yaml")],
            "tok.json": ["tokenizer", "inspect", "--tokenizer", str(root / "tok.json")],
            "hf": ["dataset", "import", "--format", "hf", "--input", str(hf), "--output", str(root / "out" / "ds")],
            "settings.yaml": ["jobs", "list", "--settings", str(root / "settings.yaml")]}


@pytest.mark.parametrize("reader", ["manifest.jsonl", "run.yaml", "tok.json", "hf", "settings.yaml"])
def test_a_deeply_nested_file_is_one_line_for_every_reader(workspace: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
                                                           reader: str) -> None:
    """A line of 100,000 `[` in a manifest, a run config, a tokenizer JSON, HF metadata or the settings gave a
    RecursionError traceback; every reader now names the file and the bound (or rejects the row)."""
    root = tmp_path / "in"
    root.mkdir()
    argv = _deep_files(root)[reader]
    before = _tree(root)
    code = _exit_code(argv)
    line = _one_error(capsys)
    assert code == 2 and ("levels deep; a file LinguaForge reads may nest at most 100" in line or "rows" in line), line
    assert _tree(root) == before and not (root / "out").exists()


def test_a_damaged_row_or_index_nested_too_deep_is_skipped_by_the_tolerant_readers(tmp_path: Path) -> None:
    """The tolerant readers (manifests, JSON lines, a cache index) skip such a line or file as damaged."""
    import json

    from core.data.manifest import read_manifest
    from core.fsutil import read_json, scan_jsonl

    manifest = tmp_path / "manifest.jsonl"
    row = {"id": "a", "audio": "a.wav", "text": "hi", "speaker": "s", "language": "en", "duration": 1.0}
    manifest.write_text(DEEP + "\n" + json.dumps(row) + "\n", encoding="utf-8")
    rows, skipped = scan_jsonl(manifest)
    assert rows == [row] and skipped == ["line 1: not JSON"]
    (tmp_path / "index.json").write_text(DEEP, encoding="utf-8")
    assert read_json(tmp_path / "index.json") is None
    (tmp_path / "a.wav").write_bytes(b"")
    kept, rejects = read_manifest(manifest)
    assert [r.id for r in kept] == ["a"] and "nested 100,000 levels deep" in rejects[0].reason


@pytest.mark.slow  # app.py's imports (Gradio, torch) in a subprocess
def test_app_refuses_a_settings_file_nested_too_deep_in_one_line(tmp_path: Path) -> None:
    """`app.py` did not start with such a settings file (a traceback); it now says why in one line, exit 2."""
    import subprocess
    import sys

    settings = tmp_path / "settings.yaml"
    settings.write_text(f"workspace: {tmp_path / 'ws'}\nui: {DEEP}\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "app.py", "--config", str(settings)], capture_output=True, text=True,
                          timeout=300, cwd=Path(__file__).resolve().parent.parent)
    lines = [line for line in proc.stderr.splitlines() if line.strip() and " INFO " not in line]
    assert proc.returncode == 2 and len(lines) == 1 and "nested 100,000 levels deep" in lines[0], proc.stderr
    assert not (tmp_path / "ws").exists()


def test_yaml_aliases_expanding_without_bound_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A "billion laughs" run config: aliases of aliases, nine each, would make 9⁹ values."""
    levels = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    levels += [f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 9) + "]" for i in range(8)]
    config = tmp_path / "laughs.yaml"
    config.write_text("\n".join(levels) + "\n", encoding="utf-8")
    assert _exit_code(["train", "--config", str(config)]) == 2
    assert "expands to more than 100,000 values" in _one_error(capsys)


def test_a_tokenizer_sized_by_an_absurd_id_is_refused(workspace: Path, tmp_path: Path, chatterbox_tokenizer: Path,
                                                      capsys: pytest.CaptureFixture) -> None:
    """The audit's tokenizer.json with one id at 4,000,000,000 was taken as size 4,000,000,001 and `embeddings
    extend`, `tokenizer merge` and the inspect chart were killed at 3–4 GB; a tokenizer file over the bound is
    refused before it is read."""
    import json

    from core.tokenizers.tokenizer import MAX_TOKENIZER_BYTES

    spec = json.loads(chatterbox_tokenizer.read_text(encoding="utf-8"))
    chatterbox_tokenizer.unlink()
    spec["model"]["vocab"]["!"] = 4_000_000_000
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(spec), encoding="utf-8")
    before = forged.read_bytes()
    for argv in (["tokenizer", "inspect", "--tokenizer", str(forged)],
                 ["tokenizer", "merge", "--base", str(forged), "--add", str(forged), "--output", str(tmp_path / "m.json")]):
        assert _exit_code(argv) == 2
        assert "id 4,000,000,000 lies beyond the vocabulary's own 2,454 entries" in _one_error(capsys)
    assert forged.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["forged.json", "workspace"]
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as handle:
        handle.truncate(MAX_TOKENIZER_BYTES + 1)  # sparse: no disk used
    assert _exit_code(["tokenizer", "inspect", "--tokenizer", str(huge)]) == 2
    assert f"{MAX_TOKENIZER_BYTES + 1:,} bytes, over the {MAX_TOKENIZER_BYTES:,}" in _one_error(capsys)


def _small_gpt2_folder(folder: Path) -> Path:
    """Write GPT-2's slow files as Turbo's release ships them, with a handful of tokens; return the folder."""
    import json

    folder.mkdir()
    (folder / "vocab.json").write_text(json.dumps({"a": 0, "b": 1, "ab": 2, "<|endoftext|>": 3}), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\na b\n", encoding="utf-8")
    (folder / "added_tokens.json").write_text(json.dumps({"[angry]": 4}), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "GPT2Tokenizer"}), encoding="utf-8")
    return folder


@pytest.mark.slow  # AutoTokenizer's import: ~20 s on a loaded machine
def test_the_small_gpt2_folder_loads(tmp_path: Path) -> None:
    """The folder the next test damages loads when whole (so what it refuses is the damage)."""
    from core.tokenizers.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(_small_gpt2_folder(tmp_path / "gpt2"))
    assert tokenizer.size == 5 and tokenizer.encode("ab") == [2]


@pytest.mark.parametrize("damage, expected", [
    ("merges", "merges.txt line 3: a b c is not a merge"),
    ("added_list", "added_tokens.json: must be a JSON object mapping each token to its id"),
    ("vocab_id", "id 9,000,000 lies beyond the vocabulary's own"),
    ("vocab_deep", "nested 100,000 levels deep"),
])
def test_a_malformed_gpt2_folder_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture, damage: str,
                                             expected: str) -> None:
    """Turbo's tokenizer folder with a `merges.txt` line `a b c` ("Error while initializing BPE") or an
    `added_tokens.json` that is a list (AttributeError) gave tracebacks through inspect, merge and the doctor."""
    import json

    folder = _small_gpt2_folder(tmp_path / "gpt2")
    if damage == "merges":
        (folder / "merges.txt").write_text("#version: 0.2\na b\na b c\n", encoding="utf-8")
    elif damage == "added_list":
        (folder / "added_tokens.json").write_text(json.dumps(["[angry]"]), encoding="utf-8")
    elif damage == "vocab_id":
        (folder / "added_tokens.json").write_text(json.dumps({"[angry]": 9_000_000}), encoding="utf-8")
    else:
        (folder / "vocab.json").write_text(DEEP, encoding="utf-8")
    before = _tree(folder)
    for argv in (["tokenizer", "inspect", "--tokenizer", str(folder)],
                 ["tokenizer", "merge", "--base", str(folder), "--add", str(folder), "--output", str(tmp_path / "m.json")],
                 ["doctor", "--family", "chatterbox-turbo", "--tokenizer", str(folder)]):
        code = _exit_code(argv)
        out = capsys.readouterr()
        assert code == 2 and "Traceback" not in out.err + out.out and expected in out.err + out.out, (argv, out)
    assert _tree(folder) == before and not (tmp_path / "m.json").exists()


# ------------------------------------------------------------------ 4 and 5: uploads as transactions


def _zip(path: Path, members: dict[str, bytes], method: int | None = None) -> Path:
    import zipfile

    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED if method is None else method) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def _damaged(path: Path, how: str) -> Path:
    """A zip whose second member is damaged after the first (so a partial extraction would leave the first)."""
    import zipfile

    data = bytes(range(256)) * 40
    method = zipfile.ZIP_STORED if how == "crc" else zipfile.ZIP_DEFLATED
    _zip(path, {"a.wav": b"RIFF first", "b.wav": data}, method)
    raw = bytearray(path.read_bytes())
    at = raw.index(b"b.wav") + len(b"b.wav") + 100  # inside b.wav's data
    raw[at:at + 8] = b"\xff" * 8
    path.write_bytes(bytes(raw))
    return path


@pytest.fixture
def upload_settings(workspace: Path):
    from core.config import load_settings

    return load_settings()


@pytest.mark.parametrize("case", ["crc", "corrupt", "file_and_folder", "long_path", "nul_name", "truncated"])
def test_a_failed_upload_is_one_line_and_leaves_nothing(upload_settings, tmp_path: Path, case: str) -> None:
    """The audit's zips: a bad CRC, corrupt data, `x.wav` followed by `x.wav/y.wav`, an over-long path, a
    NUL-named member raised unhandled errors ("internal error: Bad CRC-32") and left the members extracted
    before it in uploads/<name>/. Each is now one line and the upload leaves nothing at all."""
    from core.uploads import DATASET, store_upload

    source = tmp_path / f"{case}.zip"
    if case in ("crc", "corrupt"):
        _damaged(source, case)
    elif case == "file_and_folder":
        _zip(source, {"x.wav": b"RIFF", "x.wav/y.wav": b"RIFF"})
    elif case == "long_path":
        _zip(source, {"a.wav": b"RIFF", "/".join(["d" * 250] * 17) + "/b.wav": b"RIFF"})
    elif case == "nul_name":
        _zip(source, {"a.wav": b"RIFF", "bbbb.wav": b"RIFF"})
        source.write_bytes(source.read_bytes().replace(b"bbbb.wav", b"b\x00bb.wav"))
    else:
        _zip(source, {"a.wav": b"RIFF" * 1000})
        source.write_bytes(source.read_bytes()[:-30])
    before = source.read_bytes()
    with pytest.raises(InputError) as refused:
        store_upload(upload_settings, DATASET, [source], "audit")
    assert "\n" not in str(refused.value) and "Traceback" not in str(refused.value)
    assert not any(upload_settings.workspace.iterdir()), list(upload_settings.workspace.rglob("*"))
    assert source.read_bytes() == before


def test_many_members_are_one_pass_and_a_count_over_the_bound_is_refused_before_extracting(
        upload_settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """1,000 empty members took 8.3 s and 4,000 took 129 s (the archive reopened, its directory read again, per
    member); a 1.9 MB zip of 20,000 members had written 851 files after 150 s. The directory is now read twice
    per upload (plan, extract) whatever the member count, and over MAX_MEMBERS is refused before extracting."""
    import time
    import zipfile

    from core.uploads import DATASET, MAX_MEMBERS, store_upload

    reads = []
    directory = zipfile.ZipFile._RealGetContents
    monkeypatch.setattr(zipfile.ZipFile, "_RealGetContents", lambda self: reads.append(1) or directory(self))
    many = _zip(tmp_path / "many.zip", {f"c{i:05d}.wav": b"" for i in range(500)})
    reads.clear()
    written = store_upload(upload_settings, DATASET, [many], "many")
    assert len(written) == 500 and all(p.stat().st_size == 0 for p in written) and len(reads) == 2
    too_many = _zip(tmp_path / "too_many.zip", {f"c{i:05d}.wav": b"" for i in range(MAX_MEMBERS + 1)})
    reads.clear()
    start = time.monotonic()
    with pytest.raises(InputError, match=f"{MAX_MEMBERS + 1:,} members, over the {MAX_MEMBERS:,}"):
        store_upload(upload_settings, DATASET, [too_many], "too_many")
    assert time.monotonic() - start < 5 and len(reads) == 1
    assert sorted(p.name for p in (upload_settings.workspace / "uploads").iterdir()) == ["many"]


def test_an_upload_into_a_folder_never_replaces_a_file(upload_settings, tmp_path: Path) -> None:
    """A second upload into the same folder adds its files; one that would replace a file is refused whole."""
    from core.uploads import DATASET, store_upload

    first = _zip(tmp_path / "one.zip", {"a.wav": b"first"})
    store_upload(upload_settings, DATASET, [first], "set")
    again = _zip(tmp_path / "two.zip", {"b.wav": b"second", "a.wav": b"replaced?"})
    with pytest.raises(InputError, match="exists already; nothing was overwritten"):
        store_upload(upload_settings, DATASET, [again], "set")
    folder = upload_settings.workspace / "uploads" / "set"
    assert sorted(p.name for p in folder.iterdir()) == ["a.wav"] and (folder / "a.wav").read_bytes() == b"first"
    store_upload(upload_settings, DATASET, [_zip(tmp_path / "three.zip", {"sub/b.wav": b"second"})], "set")
    assert (folder / "sub" / "b.wav").read_bytes() == b"second"


# ------------------------------------------------------------------ 10: the file browser held to the workspace's rules


@pytest.mark.slow  # Gradio's import alone: ~20 s on a loaded machine
def test_the_file_browser_lists_nothing_through_a_link_leaving_the_roots(tmp_path: Path) -> None:
    """Through a symlinked folder the browser listed 7 names outside the roots (the files got 403). The
    dashboard's browser lists only what lies inside the roots, and nothing inside a folder leading out."""
    from gradio_app.browser import workspace_explorer

    workspace, outside = tmp_path / "workspace", tmp_path / "outside"
    (workspace / "datasets" / "am").mkdir(parents=True)
    (workspace / "datasets" / "am" / "manifest.jsonl").write_text("{}\n", encoding="utf-8")
    outside.mkdir()
    for i in range(7):
        (outside / f"secret{i}.txt").write_text("outside", encoding="utf-8")
    (workspace / "escape").symlink_to(outside, target_is_directory=True)
    (workspace / "leak.txt").symlink_to(outside / "secret0.txt")
    (workspace / "inner").symlink_to(workspace / "datasets", target_is_directory=True)  # a link that stays inside
    browser = workspace_explorer([workspace], root_dir=workspace, ignore_glob="**/.*")
    assert [e["name"] for e in browser.ls()] == ["datasets", "inner"]
    assert browser.ls(["escape"]) == []
    assert [e["name"] for e in browser.ls(["inner", "am"])] == ["manifest.jsonl"]
    assert [e["name"] for e in browser.ls(["datasets", "am"])] == ["manifest.jsonl"]
    assert [fn for fn in browser.server_fns if fn.__name__ == "ls"] == [browser.ls]  # what the page calls
    assert not Path(__file__).resolve().parent.parent.joinpath("gradio_app", "browser.pyi").exists()

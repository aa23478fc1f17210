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

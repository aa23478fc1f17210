"""Sharded feature extraction: a cache built by several shard processes (in any order, at once, one per
device, or as shard jobs taken by two workers through the Redis queue) equals the cache one process
builds — every item's bytes and every index entry — for the engine, the own codec and Chatterbox; a
shard resumes its own clips; shards that would cut the manifest differently and bad shard specs are
refused in one line before any work."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from core.data.feature_cache import INDEX_NAME, SHARDS_NAME, build_feature_cache, open_cache
from core.data.shards import Shard
from core.errors import InputError
from core.tokenizers.tokenizer import Tokenizer, load_tokenizer
from tests.data_helpers import make_codec, make_espeak_dataset, run_cli
from tests.test_feature_cache import BytesFeatures, Interrupted

REPO_ROOT = Path(__file__).resolve().parent.parent


def cache_contents(folder: Path, formats: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Return what must be equal between two builds of one cache: each item's bytes, the index's entries and skips."""
    index = open_cache(folder, formats) if formats else open_cache(folder)
    items = {p.name: p.read_bytes() for p in sorted((folder / "items").iterdir())}
    leftovers = sorted(p.name for p in folder.iterdir() if p.name not in (INDEX_NAME, "items", "pairs.json"))
    return {"items": items, "entries": index.items, "skipped": index.data["skipped"], "splits": index.data["splits"],
            "histograms": index.data["histograms"], "max_text_id": index.max_text_id, "leftovers": leftovers}


@pytest.fixture()
def manifest(tmp_path: Path) -> Path:
    """Eleven clips (the fourth one empty, so its featuriser refuses it) and one broken manifest line."""
    rows = []
    for i in range(11):
        (tmp_path / f"c{i}.wav").write_bytes(b"" if i == 3 else bytes(range(i + 1)) * (i + 2))
        rows.append({"id": f"clip {i}", "audio": f"c{i}.wav", "text": "ab" * (i + 1), "speaker": f"s{i % 2}", "language": "en"})
    lines = [json.dumps(r) for r in rows]
    lines.insert(5, "{broken")
    path = tmp_path / "manifest.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture()
def tok(chatterbox_tokenizer: Path) -> Tokenizer:
    return load_tokenizer(chatterbox_tokenizer)


def test_shards_in_any_order_build_the_single_process_cache(manifest: Path, tok: Tokenizer, tmp_path: Path) -> None:
    single = build_feature_cache(BytesFeatures(), manifest, tok, tmp_path / "one", 0.3, batch_size=2)
    expected = cache_contents(single.path, (BytesFeatures.format,))
    assert len(expected["entries"]) == 10 and [s["id"] for s in expected["skipped"]] == [None, "clip 3"]
    seen: dict[int, list[str]] = {}
    for index in (2, 0):
        source = BytesFeatures()
        info = build_feature_cache(source, manifest, tok, tmp_path / "three", 0.3, batch_size=2, shard=Shard(index, 3))
        seen[index] = source.seen
        assert not info.complete and not (info.path / INDEX_NAME).exists() and info.shard == f"{index}/3"
    assert info.missing == 4 and (info.path / SHARDS_NAME).is_file()  # shard 1/3's batches (clips 2-3, 8-9) are left
    source = BytesFeatures()
    last = build_feature_cache(source, manifest, tok, tmp_path / "three", 0.3, batch_size=2, shard=Shard(1, 3))
    seen[1] = source.seen
    # batch b (clips 2b, 2b+1) goes to shard b mod 3; the empty clip 3 is refused by shard 1, and recorded as skipped
    assert seen == {0: ["clip 0", "clip 1", "clip 6", "clip 7"], 1: ["clip 2", "clip 3", "clip 8", "clip 9"],
                    2: ["clip 4", "clip 5", "clip 10"]}
    assert last.complete and last.missing == 0 and (last.built, last.items) == (3, 10)
    assert last.path.name == single.path.name and cache_contents(last.path, (BytesFeatures.format,)) == expected
    assert expected["leftovers"] == [], "journals and the shards' record go once the index is written"


def test_a_shard_resumes_its_own_clips_and_the_other_shard_merges(manifest: Path, tok: Tokenizer, tmp_path: Path) -> None:
    single = build_feature_cache(BytesFeatures(), manifest, tok, tmp_path / "one", 0.3, batch_size=2)
    with pytest.raises(Interrupted):  # shard 1/2 holds batches 1, 3, 5: it is killed after its first two
        build_feature_cache(BytesFeatures(stop_after=4), manifest, tok, tmp_path / "two", 0.3, batch_size=2, shard=Shard(1, 2))
    resumed = BytesFeatures()
    info = build_feature_cache(resumed, manifest, tok, tmp_path / "two", 0.3, batch_size=2, shard=Shard(1, 2))
    # its finished clips are reused; the refused empty clip 3 is tried again (as a single build does) and clip 10 built
    assert resumed.seen == ["clip 3", "clip 10"] and (info.reused, info.built, info.complete) == (3, 1, False)
    other = BytesFeatures()
    merged = build_feature_cache(other, manifest, tok, tmp_path / "two", 0.3, batch_size=2, shard=Shard(0, 2))
    assert other.seen == ["clip 0", "clip 1", "clip 4", "clip 5", "clip 8", "clip 9"] and merged.complete
    assert cache_contents(merged.path, (BytesFeatures.format,)) == cache_contents(single.path, (BytesFeatures.format,))


def test_shards_that_cut_the_manifest_differently_are_refused_before_any_work(manifest: Path, tok: Tokenizer, tmp_path: Path) -> None:
    build_feature_cache(BytesFeatures(), manifest, tok, tmp_path, 0.3, batch_size=2, shard=Shard(0, 2))
    source = BytesFeatures()
    with pytest.raises(InputError, match=r"other shards featurise 2 clips per batch, this one 3; .*feature_batch_size to 2"):
        build_feature_cache(source, manifest, tok, tmp_path, 0.3, batch_size=3, shard=Shard(1, 2))
    assert source.seen == []
    assert Shard(1, 2).split(2) == [Shard(1, 4), Shard(3, 4)]
    assert [b for b in range(12) if any(s.holds(b) for s in Shard(1, 2).split(3))] == [b for b in range(12) if Shard(1, 2).holds(b)]


def _refusal(capsys: pytest.CaptureFixture[str], *args: object) -> str:
    """Run `python -m core ARGS` in this process; assert exit 2 with one line on stderr and return that line."""
    from core.cli import main as cli_main

    try:
        code = cli_main([str(a) for a in args])
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1, (args, code, err)
    return err


@pytest.mark.parametrize("spec", ["3/2", "0/0", "a/b", "1/2/3", "2/2", "-1/2", ""])
def test_a_bad_shard_spec_is_one_line_and_exit_2_before_any_work(spec: str, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from core.cli.catalogue import cli_catalogue

    err = _refusal(capsys, "preprocess", "--manifest", tmp_path / "m.jsonl", "--tokenizer", tmp_path / "t.json",
                   "--codec", tmp_path / "c.pt", "--output", tmp_path / "cache", f"--shard={spec}")
    assert f"argument --shard: {spec!r} is not a shard: give I/N with 0 ≤ I < N" in err
    assert not (tmp_path / "cache").exists()
    with pytest.raises(InputError, match=r"preprocess: argument --shard: .* is not a shard"):
        cli_catalogue().build_argv("preprocess", {"manifest": "m.jsonl", "tokenizer": "t.json", "codec": "c.pt", "shard": spec})


def test_bad_devices_and_mixed_options_are_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    own = ("--manifest", tmp_path / "m.jsonl", "--tokenizer", tmp_path / "t.json", "--codec", tmp_path / "c.pt")
    cases = {
        ("--devices", "cuda:0,gpu1", *own): "'gpu1' is not a device",
        ("--devices", "cuda:7", *own): "--devices cuda:7: not on this machine",
        ("--config", tmp_path / "run.yaml", "--codec", tmp_path / "c.pt"): "--config takes the manifest, tokenizer, codec",
        ("--manifest", tmp_path / "m.jsonl"): "preprocess needs --tokenizer, --codec",
    }
    for args, message in cases.items():
        assert message in _refusal(capsys, "preprocess", *args)


@pytest.fixture(scope="module")
def own_codec(module_tmp: Path) -> dict[str, Path]:
    manifest = make_espeak_dataset(module_tmp / "ds", per_language=12)  # 24 clips: batches of 16 and 8
    return {"manifest": manifest, "codec": make_codec(manifest, module_tmp / "codec.pt")}


def _cli(*args: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "core", *map(str, args), "--json"], cwd=REPO_ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _in_process(*args: object) -> dict[str, Any]:
    run = run_cli(*args, "--json")
    assert run.code == 0, run.stderr
    return run.json()


def _finished(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err
    return json.loads(out)


@pytest.mark.slow
def test_two_shard_processes_and_two_devices_build_the_own_codec_cache_of_one_process(
        own_codec: dict[str, Path], chatterbox_tokenizer: Path, workspace: Path, tmp_path: Path) -> None:
    inputs = ("preprocess", "--manifest", own_codec["manifest"], "--tokenizer", chatterbox_tokenizer, "--codec", own_codec["codec"])
    single = _finished(_cli(*inputs, "--output", tmp_path / "one", "--workers", "1"))
    expected = cache_contents(Path(single["path"]))
    assert single["items"] == 24 and single["complete"] and len(expected["items"]) == 24
    shards = [_cli(*inputs, "--output", tmp_path / "two", "--shard", f"{i}/2", "--workers", "1") for i in (0, 1)]
    reports = [_finished(proc) for proc in shards]  # both at once, as on two machines sharing the folder
    assert sorted(r["built"] for r in reports) == [8, 16] and any(r["complete"] for r in reports)
    assert cache_contents(Path(reports[0]["path"])) == expected
    devices = _finished(_cli(*inputs, "--output", tmp_path / "devices", "--devices", "cpu,cpu"))
    assert devices["complete"] and [s["shard"] for s in devices["shards"]] == ["0/2", "1/2"]
    assert [s["built"] for s in devices["shards"]] == [16, 8]
    assert cache_contents(Path(devices["path"])) == expected


@pytest.mark.slow
def test_shard_jobs_taken_by_two_workers_through_the_redis_queue_build_one_cache(
        own_codec: dict[str, Path], workspace: Path, tmp_path: Path) -> None:
    from tests.test_jobs_support import make_jobs_env, redis_server

    data = workspace / "datasets" / "am"
    make_espeak_dataset(data, per_language=12)
    make_codec(data / "manifest.jsonl", workspace / "codec.pt")
    params = {"manifest": "datasets/am/manifest.jsonl", "tokenizer": "tokenizers/bpe.model", "codec": "codec.pt",
              "output": "sharded", "workers": 1}
    for url in redis_server(tmp_path):
        for env in make_jobs_env(workspace, tmp_path, url=url, workers=1):
            runner = env.runner
            with pytest.raises(InputError, match="'2/2' is not a shard"):
                runner.submit("preprocess", {**params, "shard": "2/2"})
            jobs = [runner.submit("preprocess", {**params, "shard": f"{i}/2"}) for i in (0, 1)]
            env.start_worker()  # two workers, one consumer each: on two machines they would share the workspace
            env.start_worker()
            done = [runner.wait(job, 600) for job in jobs]
            assert [d["status"] for d in done] == ["succeeded", "succeeded"], [runner.read_log(j) for j in jobs]
    built = next((workspace / "sharded").iterdir())
    one = run_cli("preprocess", "--manifest", data / "manifest.jsonl", "--tokenizer", workspace / "tokenizers" / "bpe.model",
                  "--codec", workspace / "codec.pt", "--output", tmp_path / "single", "--workers", "1", "--json")
    assert one.code == 0, one.stderr
    assert cache_contents(built) == cache_contents(Path(one.json()["path"]))


@pytest.mark.slow
def test_chatterbox_features_built_by_two_devices_equal_one_process(workspace: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.chatterbox_helpers import make_chatterbox_folder

    make_chatterbox_folder(workspace / "models" / "chatterbox")
    make_espeak_dataset(workspace / "datasets" / "en", per_language=5, languages=("en",))
    settings = tmp_path / "settings.yaml"
    settings.write_text(yaml.safe_dump({"families": {"chatterbox": {"feature_batch_size": 2}}}), encoding="utf-8")
    config = workspace / "cb.yaml"
    config.write_text(yaml.safe_dump({
        "name": "cb", "family": "chatterbox", "model_dir": "models/chatterbox",
        "tokenizer": "models/chatterbox/grapheme_mtl_merged_expanded_v1.json",
        "data": {"manifest": "datasets/en/manifest.jsonl", "val_ratio": 0.2}}), encoding="utf-8")
    monkeypatch.setenv("LINGUAFORGE_SETTINGS", str(settings))  # the spawned device processes inherit it
    single = _in_process("preprocess", "--config", config)
    folder = Path(single["path"])
    assert single["complete"] and single["items"] == 5 and (folder / "pairs.json").is_file()
    expected = cache_contents(folder)
    assert open_cache(folder).data["family"] == "chatterbox" and len(expected["items"]) == 5
    folder.rename(tmp_path / "single")
    sharded = _in_process("preprocess", "--config", config, "--devices", "cpu,cpu")
    assert sharded["path"] == str(folder) and [s["built"] for s in sharded["shards"]] == [3, 2]  # batches 0 and 2, batch 1
    assert cache_contents(folder) == expected and (folder / "pairs.json").is_file()

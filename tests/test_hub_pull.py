"""`models pull` and `model_dir: hf:…` (core/hub.py) against a Hub cache the test builds in the real layout,
under HF_HUB_OFFLINE=1 with HF_HOME in the test's folder: the reduced releases in their published file layout,
only the release's files linked, checked by content, repository, revision and sha256s recorded."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from tests.hub_helpers import cache_repo, folder_files

pytestmark = pytest.mark.slow  # builds (once a session) the reduced Chatterbox and Turbo folders


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HF_HOME in the test's folder, offline: every `models pull` resolves from the cache the test builds."""
    home = tmp_path / "hf"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    return home


@pytest.fixture
def chatterbox_repo(hub: Path, tmp_path: Path) -> tuple[str, Path]:
    """ResembleAI/chatterbox in the cache: the reduced multilingual release with both a v2 and a v3 T3
    (the v3 one another random T3 of the same shape), plus a file no release reads."""
    from tests.chatterbox_helpers import make_chatterbox_folder

    folder = make_chatterbox_folder(tmp_path / "release")
    shutil.copyfile(folder / "t3_mtl23ls_v2.safetensors", folder / "t3_mtl23ls_v3.safetensors")
    (folder / "README.md").write_text("not read\n", encoding="utf-8")
    return cache_repo(hub, "ResembleAI/chatterbox", folder_files(folder)), folder


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_pull_v3_offline_links_only_its_files_checks_them_and_records_the_revision(cli, workspace, chatterbox_repo) -> None:
    commit, release = chatterbox_repo
    run = cli("models", "pull", "chatterbox:v3", "--json")
    assert run.code == 0, run.stderr
    folder = workspace / "models" / "chatterbox-v3"
    assert run.json()["folder"] == str(folder)
    assert sorted(p.name for p in folder.iterdir()) == [
        "grapheme_mtl_merged_expanded_v1.json", "hub_release.json", "s3gen.pt", "t3_mtl23ls_v3.safetensors", "ve.pt"]
    record = json.loads((folder / "hub_release.json").read_text(encoding="utf-8"))
    assert record["release"] == "chatterbox:v3" and record["label"] == "Chatterbox multilingual v3"
    assert record["content"] == ("T3 t3_mtl23ls_v3.safetensors: Llama, 1 layers × 1024, 2454 text rows = the "
                                 "tokenizer's 2454 ids")
    [source] = record["sources"]
    assert source["repo"] == "ResembleAI/chatterbox" and source["revision"] == commit
    assert source["files"] == {name: _sha(release / name) for name in (
        "grapheme_mtl_merged_expanded_v1.json", "s3gen.pt", "t3_mtl23ls_v3.safetensors", "ve.pt")}
    assert (folder / "ve.pt").read_bytes() == (release / "ve.pt").read_bytes()
    # v2 from the same cache, by name and by the repository id at its commit
    assert cli("models", "pull", "chatterbox").code == 0
    assert (workspace / "models" / "chatterbox" / "t3_mtl23ls_v2.safetensors").is_file()
    assert not (workspace / "models" / "chatterbox" / "t3_mtl23ls_v3.safetensors").exists()
    run = cli("models", "pull", f"hf:ResembleAI/chatterbox@{commit}", "--json")
    assert run.code == 0, run.stderr
    assert run.json()["sources"][0]["revision"] == commit


def test_a_missing_file_or_repository_is_refused_in_one_line_naming_it(cli, hub, workspace, tmp_path: Path) -> None:
    from tests.chatterbox_helpers import make_chatterbox_folder

    folder = make_chatterbox_folder(tmp_path / "release")
    files = folder_files(folder)
    del files["s3gen.pt"]
    cache_repo(hub, "ResembleAI/chatterbox", files)
    run = cli("models", "pull", "chatterbox")
    assert run.code == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and "s3gen.pt missing from Chatterbox multilingual v2" in run.stderr
    assert "run `python -m core models pull chatterbox` with the network" in run.stderr
    run = cli("models", "pull", "indextts2")
    assert run.code == 2 and run.stderr == (
        "error: IndexTeam/IndexTTS-2: not in the Hub cache and HF_HUB_OFFLINE=1 is set: run `python -m core models pull "
        "indextts2` with the network (the cache: HF_HOME / HF_HUB_CACHE).\n")
    run = cli("models", "pull", "hf:someone/else")
    assert run.code == 2 and "hf:someone/else: no family reads this repository" in run.stderr


def test_turbo_pulled_offline_is_checked_by_content(cli, hub, workspace, tmp_path: Path) -> None:
    from tests.turbo_helpers import make_turbo_folder

    folder = make_turbo_folder(tmp_path / "turbo")
    commit = cache_repo(hub, "ResembleAI/chatterbox-turbo", folder_files(folder))
    run = cli("models", "pull", "chatterbox-turbo", "--json")
    assert run.code == 0, run.stderr
    record = run.json()
    assert record["sources"][0]["revision"] == commit and record["label"] == "Chatterbox-Turbo"
    assert record["content"] == "T3 t3_turbo_v1.safetensors: GPT-2, 2 layers × 256, 50276 text rows = the tokenizer's 50276 ids"
    # the same files published as Nano: a 256-wide T3 named t3_nano_v1 is refused by its width
    (folder / "t3_turbo_v1.safetensors").rename(folder / "t3_nano_v1.safetensors")
    cache_repo(hub, "ResembleAI/chatterbox-nano", folder_files(folder))
    run = cli("models", "pull", "chatterbox-nano")
    assert run.code == 2 and "256 wide, so a Turbo T3 (Nano is GPT-2 small's 768), though named t3_nano_v1.safetensors" in run.stderr


def _nano_t3(path: Path) -> None:
    """Write a Nano T3 as published in shape — GPT-2 small's width (768) and the release's 50276 text rows — with one
    layer: built on the meta device, then its tensors drawn N(0, 0.02) (random initialisation at this size costs
    half a minute; the pull reads shapes and bytes, not values)."""
    import torch
    from safetensors.torch import save_file

    from core.families.chatterbox_turbo.t3 import NANO_WIDTH, TurboConfig, build_turbo_t3
    from tests.turbo_helpers import BASE_ROWS

    with torch.device("meta"):
        t3 = build_turbo_t3(TurboConfig(text_tokens_dict_size=BASE_ROWS, n_layers=1, hidden_size=NANO_WIDTH,
                                        n_positions=64))
    generator = torch.Generator().manual_seed(0)
    save_file({k: torch.empty(v.shape).normal_(0.0, 0.02, generator=generator) for k, v in t3.state_dict().items()},
              str(path))


def test_nano_pulled_offline_is_told_from_turbo_by_its_width(cli, hub, workspace, tmp_path: Path) -> None:
    from tests.turbo_helpers import make_turbo_folder

    folder = make_turbo_folder(tmp_path / "nano")
    (folder / "t3_turbo_v1.safetensors").unlink()
    _nano_t3(folder / "t3_nano_v1.safetensors")
    commit = cache_repo(hub, "ResembleAI/chatterbox-nano", folder_files(folder))
    run = cli("models", "pull", "chatterbox-nano", "--json")
    assert run.code == 0, run.stderr
    record = run.json()
    assert record["label"] == "Chatterbox-Nano" and record["sources"][0]["revision"] == commit
    assert record["content"] == "T3 t3_nano_v1.safetensors: GPT-2, 1 layers × 768, 50276 text rows = the tokenizer's 50276 ids"
    pulled = Path(record["folder"])
    assert (pulled / "t3_nano_v1.safetensors").read_bytes() == (folder / "t3_nano_v1.safetensors").read_bytes()
    assert not (pulled / "t3_turbo_v1.safetensors").exists()
    assert record["sources"][0]["files"]["t3_nano_v1.safetensors"] == _sha(folder / "t3_nano_v1.safetensors")


def test_a_run_config_model_dir_hf_id_resolves_through_the_cache(
        hub, workspace, chatterbox_repo) -> None:
    import subprocess
    import sys

    commit, _ = chatterbox_repo
    (workspace / "run.yaml").write_text("name: r\nfamily: chatterbox\ntokenizer: t.json\nmodel_dir: hf:ResembleAI/chatterbox\n"
                                        "data: {manifest: m.jsonl}\n", encoding="utf-8")
    script = ("from core.config import load_settings; from core.training.run_config import load_run_config; "
              "from core.training.plan import resolve_model_dir; from core.hub import read_release_record; s = load_settings(); "
              "c = load_run_config(s.workspace / 'run.yaml', s); d = resolve_model_dir(c, s, 'chatterbox'); "
              "print(d); print(read_release_record(d)['sources'][0]['revision'])")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                          cwd=Path(__file__).resolve().parent.parent)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(workspace / "models" / "ResembleAI-chatterbox"), commit]
    (workspace / "run.yaml").write_text("name: r\nfamily: chatterbox\ntokenizer: t.json\nmodel_dir: hf:../x\n"
                                        "data: {manifest: m.jsonl}\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                          cwd=Path(__file__).resolve().parent.parent)
    assert proc.returncode != 0 and "run.yaml.model_dir: 'hf:../x': not a Hub repository id" in proc.stderr


def test_the_release_record_is_checkpoint_metadata(tmp_path: Path) -> None:
    import torch

    from core.checkpoint import CheckpointMeta, load_checkpoint, save_checkpoint

    record = {"release": "chatterbox:v3", "sources": [{"repo": "ResembleAI/chatterbox", "revision": "a" * 40,
                                                       "files": {"ve.pt": "b" * 64}}]}
    save_checkpoint(tmp_path / "c.safetensors", {"w": torch.zeros(2)}, CheckpointMeta(family="chatterbox", release=record))
    assert load_checkpoint(tmp_path / "c.safetensors").meta["release"] == record


def test_indextts2_and_its_four_companions_are_assembled_side_by_side(cli, hub, workspace, tmp_path: Path) -> None:
    from core.families.releases import get_release
    from tests.indextts_helpers import add_speech_models, build_model_folder

    built = build_model_folder(tmp_path / "indextts")
    add_speech_models(built)
    files = folder_files(built)
    commits = {}
    for part in get_release("indextts2").parts:  # each repository holds its files as published, without the sub-folder
        prefix = f"{part.folder}/" if part.folder else ""
        held = {name[len(prefix):]: path for name, path in files.items() if name.startswith(prefix) and any(
            fnmatch.fnmatchcase(name[len(prefix):], pattern) for pattern in part.patterns)}
        commits[part.repo] = cache_repo(hub, part.repo, held)
    run = cli("models", "pull", "indextts2", "--json")
    assert run.code == 0, run.stderr
    folder = workspace / "models" / "indextts2"
    record = run.json()
    assert {s["repo"]: s["revision"] for s in record["sources"]} == commits
    assert record["content"] == "GPT gpt.pth: 12001 text rows = bpe.model's 12000 pieces + 1"
    placed = folder_files(folder)
    for name in ("w2v-bert-2.0/model.safetensors", "semantic_codec/model.safetensors", "campplus_cn_common.bin",
                 "bigvgan/bigvgan_generator.pt", "gpt.pth", "s2mel.pth"):
        assert placed[name].read_bytes() == files[name].read_bytes(), name
    by_file = {name: digest for s in record["sources"] for name, digest in s["files"].items()}  # paths in the folder
    assert by_file == {name: _sha(placed[name]) for name in placed if name != "hub_release.json"}


def test_the_pull_help_names_every_release(cli) -> None:
    """`models pull --help` lists each name `core.families.releases` pulls (written out there, so checked here)."""
    from core.families.releases import RELEASES

    run = cli("models", "pull", "--help")
    assert run.code == 0
    listed = " ".join(run.stdout.split())
    assert all(f"{name} |" in listed or f"{name}," in listed for name in RELEASES), (sorted(RELEASES), listed)
    assert "hf:owner/repo[@revision]" in listed

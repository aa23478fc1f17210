"""Published model folders in the configured roots (core/families/folders.py): which folders are listed for
a family, and what a check says is missing. Files are empty placeholders named as the releases name them:
listing and checking read names, never weights."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.config import load_settings
from core.errors import InputError
from core.families.folders import check_model_folder, find_model_folders

MULTILINGUAL = ("ve.pt", "t3_mtl23ls_v2.safetensors", "s3gen.pt", "grapheme_mtl_merged_expanded_v1.json")


def _touch(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(b"")
    return folder


@pytest.fixture()
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("LINGUAFORGE_WORKSPACE", str(tmp_path / "workspace"))
    (tmp_path / "workspace").mkdir()
    return load_settings()


def test_folders_holding_a_published_checkpoint_are_listed_per_family(settings, tmp_path: Path) -> None:
    ws = settings.workspace
    _touch(ws / "models" / "chatterbox", *MULTILINGUAL)
    _touch(ws / "models" / "english", "t3_cfg.safetensors")
    _touch(ws / "models" / "indextts", "gpt.pth", "bpe.model")
    _touch(ws / "models" / ".hidden", "t3_cfg.safetensors")
    _touch(ws / "a" / "b" / "c" / "d" / "e", "t3_cfg.safetensors")  # deeper than MAX_DEPTH
    _touch(ws / "runs" / "x", "config.yaml")
    (ws / "linked").symlink_to(tmp_path / "outside", target_is_directory=True)
    _touch(tmp_path / "outside", "t3_cfg.safetensors")
    assert find_model_folders(settings, "chatterbox") == ["models/chatterbox", "models/english"]
    assert find_model_folders(settings, "indextts") == ["models/indextts"]
    settings.data["data_roots"] = [str(tmp_path / "outside")]
    assert find_model_folders(settings, "chatterbox") == [str(tmp_path / "outside"), "models/chatterbox", "models/english"]


def test_a_check_names_every_missing_file_of_the_release_the_folder_holds(settings) -> None:
    ws = settings.workspace
    _touch(ws / "models" / "cb", "t3_mtl23ls_v2.safetensors", "ve.pt")
    check = check_model_folder(settings, "chatterbox", "models/cb")
    assert not check.ok and check.missing == ["s3gen.pt", "grapheme_mtl_merged_expanded_v1.json"]
    assert check.problem == (  # the release, where it is published, every file it needs, and how to get it
        "models/cb lacks s3gen.pt, grapheme_mtl_merged_expanded_v1.json. Resemble AI's Chatterbox (multilingual) is "
        "published as ResembleAI/chatterbox on the Hugging Face Hub; its model folder needs ve.pt, t3_mtl23ls_v2.safetensors, "
        "s3gen.pt, grapheme_mtl_merged_expanded_v1.json (conds.pt too when there). Fetch it with "
        "`python -m core models pull chatterbox` (nothing downloads unless asked), or copy its files into the folder.")
    _touch(ws / "models" / "en", "t3_cfg.safetensors")
    assert check_model_folder(settings, "chatterbox", "models/en").missing == ["ve.safetensors", "s3gen.safetensors", "tokenizer.json"]
    _touch(ws / "models" / "cb", "s3gen.pt", "grapheme_mtl_merged_expanded_v1.json")
    check = check_model_folder(settings, "chatterbox", "models/cb")
    assert check.ok and check.files["t3"] == ws / "models" / "cb" / "t3_mtl23ls_v2.safetensors"
    _touch(ws / "models" / "ix", "gpt.pth")
    assert check_model_folder(settings, "indextts", "models/ix").missing == [
        "config.yaml", "bpe.model", "wav2vec2bert_stats.pt"]


def test_a_folder_outside_the_roots_or_not_a_folder_is_refused(settings, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="outside the allowed folders"):
        check_model_folder(settings, "chatterbox", str(_touch(tmp_path / "elsewhere", *MULTILINGUAL)))
    with pytest.raises(InputError, match="not a folder"):
        check_model_folder(settings, "chatterbox", "models/none")

"""Published model folders in the configured roots (core/families/folders.py): which folders are listed for
a family, what a check says is missing (with the pull command), which release a folder holds (v3 before v2)
and what its files' content holds. Listing and missing files read names (empty placeholders); a complete
folder is checked by content, on the reduced releases the family tests build."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

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
    assert check.release == "chatterbox"
    assert check.problem == (  # the release, where it is published, every file it needs, and how to get it
        "models/cb lacks s3gen.pt, grapheme_mtl_merged_expanded_v1.json of Chatterbox multilingual v2. Chatterbox "
        "multilingual v2 is published as ResembleAI/chatterbox on the Hugging Face Hub; its model folder needs ve.pt, "
        "t3_mtl23ls_v2.safetensors, s3gen.pt, grapheme_mtl_merged_expanded_v1.json (conds.pt too when there). Fetch it "
        "with `python -m core models pull chatterbox` (nothing downloads unless asked), or copy its files into the folder.")
    _touch(ws / "models" / "en", "t3_cfg.safetensors")
    assert check_model_folder(settings, "chatterbox", "models/en").missing == ["ve.safetensors", "s3gen.safetensors", "tokenizer.json"]
    _touch(ws / "models" / "ix", "gpt.pth")
    check = check_model_folder(settings, "indextts", "models/ix")
    assert check.missing == ["config.yaml", "bpe.model", "wav2vec2bert_stats.pt"]
    assert "`python -m core models pull indextts2`" in check.problem
    _touch(ws / "models" / "nano", "t3_nano_v1.safetensors")
    check = check_model_folder(settings, "chatterbox-turbo", "models/nano")
    assert check.release == "chatterbox-nano" and "`python -m core models pull chatterbox-nano`" in check.problem


@pytest.mark.slow  # builds (once a session) the reduced Chatterbox speech folder
def test_v3_is_preferred_over_v2_and_the_choice_is_shown(settings) -> None:
    from tests.chatterbox_helpers import make_chatterbox_speech_folder

    folder = make_chatterbox_speech_folder(settings.workspace / "models" / "cb")
    check = check_model_folder(settings, "chatterbox", "models/cb")
    assert check.ok, check.problem
    assert check.release == "chatterbox" and check.files["t3"].name == "t3_mtl23ls_v2.safetensors"
    assert check.shown == ("Chatterbox multilingual v2 (t3_mtl23ls_v2.safetensors): T3 t3_mtl23ls_v2.safetensors: Llama, "
                           "1 layers × 1024, 2454 text rows = the tokenizer's 2454 ids")
    shutil.copyfile(folder / "t3_mtl23ls_v2.safetensors", folder / "t3_mtl23ls_v3.safetensors")
    check = check_model_folder(settings, "chatterbox", "models/cb")
    assert check.ok and check.release == "chatterbox:v3" and check.files["t3"] == folder / "t3_mtl23ls_v3.safetensors"
    assert check.shown.startswith("Chatterbox multilingual v3 (t3_mtl23ls_v3.safetensors; t3_mtl23ls_v2.safetensors also "
                                  "here, not used): T3 t3_mtl23ls_v3.safetensors: Llama")


def _fake_t3(path: Path, backbone: str, rows: int, width: int) -> None:
    save_file({f"tfmr.{backbone}.0.weight": torch.zeros(2, 2), "text_emb.weight": torch.zeros(rows, width)}, str(path))


@pytest.mark.slow  # builds (once a session) the reduced Chatterbox speech folder
def test_a_release_whose_content_is_not_what_its_names_say_is_refused_with_the_pull_command(settings) -> None:
    from tests.chatterbox_helpers import make_chatterbox_speech_folder

    folder = make_chatterbox_speech_folder(settings.workspace / "models" / "cb")
    _fake_t3(folder / "t3_mtl23ls_v3.safetensors", "h", 2454, 64)
    check = check_model_folder(settings, "chatterbox", "models/cb")
    assert not check.ok and check.problem == (
        f"{folder / 't3_mtl23ls_v3.safetensors'}: not a Llama T3 (no tfmr.layers.* / text_emb.weight), so not family "
        "chatterbox's (a Llama T3 is the multilingual release's, a GPT-2 one Turbo's or Nano's); replace it: "
        "`python -m core models pull chatterbox:v3`.")
    _fake_t3(folder / "t3_mtl23ls_v3.safetensors", "layers", 704, 64)
    assert check_model_folder(settings, "chatterbox", "models/cb").problem == (
        f"{folder / 't3_mtl23ls_v3.safetensors'}: 704 text rows, but the folder's tokenizer grapheme_mtl_merged_expanded_v1.json "
        "has 2454 ids: the two come from different releases; pull the release whole: `python -m core models pull chatterbox:v3`.")


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_turbo_and_nano_are_told_apart_by_their_width(settings) -> None:
    from core.families.registry import get_model_family
    from tests.turbo_helpers import make_turbo_folder

    family = get_model_family("chatterbox-turbo")
    folder = make_turbo_folder(settings.workspace / "models" / "turbo")
    assert family.check_release(family.published_files(folder)) == (
        "T3 t3_turbo_v1.safetensors: GPT-2, 2 layers × 256, 50276 text rows = the tokenizer's 50276 ids")
    _fake_t3(folder / "t3_turbo_v1.safetensors", "h", 50276, 768)
    with pytest.raises(InputError, match=r"768 wide, so a Nano T3 \(Nano is GPT-2 small's 768\), though named t3_turbo_v1"):
        family.check_release(family.published_files(folder))


def test_an_indextts_gpt_must_match_its_bpe_model_and_config(settings) -> None:
    import yaml

    from core.families.registry import get_model_family
    from tests.indextts_helpers import build_model_folder

    family = get_model_family("indextts")
    folder = build_model_folder(settings.workspace / "models" / "ix")
    files = family.published_files(folder)
    assert family.check_release(files) == "GPT gpt.pth: 12001 text rows = bpe.model's 12000 pieces + 1"
    config = yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8"))
    config["gpt"]["number_text_tokens"] = 24000
    (folder / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    with pytest.raises(InputError, match="gpt.number_text_tokens is 24000, bpe.model has 12000 pieces; pull the release "
                                         "whole: `python -m core models pull indextts2`"):
        family.check_release(files)


def test_a_folder_outside_the_roots_or_not_a_folder_is_refused(settings, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="outside the allowed folders"):
        check_model_folder(settings, "chatterbox", str(_touch(tmp_path / "elsewhere", *MULTILINGUAL)))
    with pytest.raises(InputError, match="not a folder"):
        check_model_folder(settings, "chatterbox", "models/none")


def test_the_v3_file_name_is_the_one_the_published_class_resolves() -> None:
    from chatterbox.mtl_tts import MULTILINGUAL_T3_MODELS

    from core.families.chatterbox.t3 import MULTILINGUAL_T3

    assert {version: MULTILINGUAL_T3_MODELS[version] for version in ("v2", "v3")} == MULTILINGUAL_T3


@pytest.mark.slow  # builds (once a session) the reduced Chatterbox folder
def test_the_doctor_names_the_release_it_trains_from_or_the_pull_command(settings) -> None:
    from core.checks.chatterbox import check_files
    from core.checks.doctor import doctor_context_from_run_config
    from core.training.run_config import run_config_from_dict
    from tests.chatterbox_helpers import make_chatterbox_folder

    folder = make_chatterbox_folder(settings.workspace / "models" / "cb")
    shutil.copyfile(folder / "t3_mtl23ls_v2.safetensors", folder / "t3_mtl23ls_v3.safetensors")
    config = run_config_from_dict({"name": "d", "family": "chatterbox", "model_dir": "models/cb", "data": {"manifest": "m.jsonl"},
                                   "tokenizer": "models/cb/grapheme_mtl_merged_expanded_v1.json"}, "d.yaml")
    ctx = doctor_context_from_run_config(config, None, settings)
    result = check_files(ctx)
    assert result.status == "pass" and result.message == (
        f"{folder}: Chatterbox multilingual v3 (grapheme_mtl_merged_expanded_v1.json, s3gen.pt, t3_mtl23ls_v3.safetensors, "
        "ve.pt); T3 t3_mtl23ls_v3.safetensors: Llama, 1 layers × 1024, 2454 text rows = the tokenizer's 2454 ids.")
    (folder / "s3gen.pt").unlink()
    result = check_files(ctx)
    assert result.status == "fail" and "s3gen.pt: missing from the Chatterbox folder" in result.message
    assert result.fix == "`python -m core models pull chatterbox:v3`, or copy the published chatterbox files into the folder."

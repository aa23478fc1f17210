"""A Chatterbox model folder of random-initialised REAL classes at reduced size, in the published layout.

T3 keeps the width (its perceiver fixes 1024) with one Llama layer, a narrower MLP and shorter
position tables (256 text, 512 speech rows); the
VoiceEncoder is full size (1.4M parameters); `s3gen.pt` holds the S3 tokenizer's `tokenizer.*`
tensors at width 128 with one block (a full S3Gen is 264M parameters, too large for feature tests).
The folder is built once per session and copied to each caller.

`make_chatterbox_speech_folder` is the folder synthesis needs: the same T3, VoiceEncoder and
tokenizer JSON with `s3gen.pt` holding a random-initialised FULL published `S3Gen()` (its size is
fixed by the class) in the published layout, its floating tensors saved in bf16 (529 MB instead
of 1 GB; `S3Gen.load_state_dict` copies them into its fp32 weights, strictly). It is built into
the caller's folder (one test speaks through it), so it goes when that folder goes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

from tests.fixture_paths import CHATTERBOX_TOKENIZER

REDUCED = {"n_layers": 1, "hidden_size": 1024, "intermediate_size": 256, "max_text_tokens": 254, "max_speech_tokens": 508}


def _build(folder: Path) -> None:
    from chatterbox.models.voice_encoder import VoiceEncoder

    from core.families.chatterbox.t3 import ChatterboxConfig, build_t3
    from core.families.chatterbox.feature_models import build_s3_tokenizer

    torch.manual_seed(0)
    folder.mkdir(parents=True, exist_ok=True)
    t3 = build_t3(ChatterboxConfig(text_tokens_dict_size=2454, **REDUCED))
    save_file({k: v.contiguous() for k, v in t3.state_dict().items()}, str(folder / "t3_mtl23ls_v2.safetensors"))
    torch.save(VoiceEncoder().state_dict(), folder / "ve.pt")
    s3 = build_s3_tokenizer(128, 1)
    torch.save({f"tokenizer.{k}": v for k, v in s3.state_dict().items()}, folder / "s3gen.pt")
    shutil.copyfile(CHATTERBOX_TOKENIZER, folder / "grapheme_mtl_merged_expanded_v1.json")


def _reduced_folder() -> Path:
    """The reduced folder, built once per test run and shared by the workers (tests/artefacts.py): read-only."""
    from tests.artefacts import built_once

    return built_once("chatterbox-model", REDUCED, [Path(__file__), CHATTERBOX_TOKENIZER], _build,
                      ["chatterbox-light", "torch", "safetensors"])


def make_chatterbox_folder(dest: Path) -> Path:
    """Copy the session's reduced Chatterbox folder to `dest` and return it."""
    shutil.copytree(_reduced_folder(), dest, dirs_exist_ok=True)
    return dest


def make_chatterbox_speech_folder(dest: Path, copy: bool = False) -> Path:
    """Build the Chatterbox speech folder (reduced T3, full random S3Gen: `copy_random_s3gen`) into `dest`
    and return it.

    The T3, VoiceEncoder and tokenizer are links to the session's reduced folder (read-only), or
    copies with `copy` (a folder whose files must lie inside the app's roots, as jobs check)."""
    reduced = _reduced_folder()
    dest.mkdir(parents=True)
    for name in ("t3_mtl23ls_v2.safetensors", "ve.pt", "grapheme_mtl_merged_expanded_v1.json"):
        if copy:
            shutil.copyfile(reduced / name, dest / name)
        else:
            (dest / name).symlink_to(reduced / name)
    copy_random_s3gen(dest / "s3gen.pt", meanflow=False)
    return dest


def copy_random_s3gen(dest: Path, meanflow: bool) -> Path:
    """Write a random-initialised (seed 0) full published `S3Gen(meanflow=…)` to the file `dest` — its floating
    tensors in bf16, a torch pickle (Chatterbox's `s3gen.pt`) or safetensors (Turbo's `s3gen_meanflow.safetensors`)
    — and leave torch's random state as building it leaves it, as tests building it here did. Built once per
    test run and shared by the workers (tests/artefacts.py); `dest` is a copy."""
    from tests.artefacts import built_once, leave_rng_as_built

    def build(folder: Path) -> None:
        from chatterbox.models.s3gen import S3Gen

        torch.manual_seed(0)
        state = {k: (v.to(torch.bfloat16) if v.is_floating_point() else v).contiguous()
                 for k, v in S3Gen(meanflow=meanflow).state_dict().items()}
        if meanflow:
            save_file(state, str(folder / "s3gen.safetensors"))
        else:
            torch.save(state, folder / "s3gen.pt")

    built = built_once("s3gen", {"meanflow": meanflow, "seed": 0}, [Path(__file__)], build,
                       ["chatterbox-light", "torch", "safetensors"], keep_rng=True)
    shutil.copyfile(built / ("s3gen.safetensors" if meanflow else "s3gen.pt"), dest)
    leave_rng_as_built(built)
    return dest


def with_pieces(base: Path, pieces: list[str], dest: Path) -> Path:
    """Write a copy of the HF tokenizer `base` with `pieces` appended after its highest id (a prefix extension)."""
    data = json.loads(base.read_text(encoding="utf-8"))
    top = max([*data["model"]["vocab"].values(), *(t["id"] for t in data.get("added_tokens", []))])
    for i, piece in enumerate(pieces, 1):
        data["model"]["vocab"][piece] = top + i
    dest.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return dest


def extend_to_amharic(root: Path, model_dir: Path) -> None:
    """Write `root/tokenizers/am.json` (the folder's tokenizer merged with Amharic pieces and the [am] tag)
    and `root/checkpoints/t3_am.safetensors` (the folder's T3 extended to it, new rows the mean)."""
    from core.data.sample_text import AMHARIC_SENTENCES
    from core.tokenizers.hf_merge import merge_hf_tokenizer
    from core.training.embeddings import extend_checkpoint

    base_tok = model_dir / "grapheme_mtl_merged_expanded_v1.json"
    am = root / "tokenizers" / "am.json"
    am.parent.mkdir(parents=True, exist_ok=True)
    merge_hf_tokenizer(base_tok, am, corpus_lines=list(AMHARIC_SENTENCES), vocab_size=400, language_tag="am")
    (root / "checkpoints").mkdir(parents=True, exist_ok=True)
    extend_checkpoint(model_dir / "t3_mtl23ls_v2.safetensors", base_tok, am, root / "checkpoints" / "t3_am.safetensors",
                      family="chatterbox", init="mean")


def chatterbox_workspace(root: Path) -> Path:
    """Fill the workspace `root`: the reduced folder (`models/chatterbox`), the espeak sample of 6 en + 6 am clips
    (`datasets/espeak`), `tokenizers/am.json` and `checkpoints/t3_am.safetensors` (`extend_to_amharic`); return it."""
    from tests.data_helpers import make_espeak_dataset

    model_dir = make_chatterbox_folder(root / "models" / "chatterbox")
    make_espeak_dataset(root / "datasets" / "espeak", per_language=6)
    extend_to_amharic(root, model_dir)
    return root

"""What a Chatterbox export carries so the published `ChatterboxMultilingualTTS` speaks from it.

The published class builds `T3(T3Config.multilingual())` (2,454 text rows) and refuses language
ids outside `SUPPORTED_LANGUAGES`. The export carries `speak_chatterbox.py`
(beside this module), the few lines that build the grown T3 and accept the new tags, the
folder's `ve.pt`, `s3gen.pt`, `conds.pt` and `Cangjie5_TC.json` (hard-linked, a copy where the
file system cannot link) and, in linguaforge.json, `t3_backbone`: the LLAMA_CONFIGS entry and
position limits of a T3 whose backbone is not the published Llama_520M.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from core.families.chatterbox.t3 import ChatterboxConfig, t3_hparams
from core.fsutil import link_or_copy

SHIM_NAME = "speak_chatterbox.py"
SHIM_SOURCE = Path(__file__).resolve().parent / SHIM_NAME
PUBLISHED_LLAMA = "Llama_520M"
CARRIED = ("ve.pt", "s3gen.pt")
CARRIED_IF_PRESENT = ("conds.pt", "Cangjie5_TC.json")


def t3_backbone(config: ChatterboxConfig) -> dict[str, Any] | None:
    """Return what `speak_chatterbox.py` needs to build a T3 of `config`'s backbone (the LLAMA_CONFIGS
    entry and the position limits), or None for the published Llama_520M with its published limits."""
    from chatterbox.models.t3.llama_configs import LLAMA_CONFIGS
    from chatterbox.models.t3.modules.t3_config import T3Config

    hp, published = t3_hparams(config), T3Config()
    if hp.llama_config_name == PUBLISHED_LLAMA and (hp.max_text_tokens, hp.max_speech_tokens) == (
            published.max_text_tokens, published.max_speech_tokens):
        return None
    return {"llama_config_name": hp.llama_config_name, "llama_config": dict(LLAMA_CONFIGS[hp.llama_config_name]),
            "max_text_tokens": hp.max_text_tokens, "max_speech_tokens": hp.max_speech_tokens}


def carry_published_files(model_dir: Path | None, output_dir: Path, carried: tuple[str, ...] = CARRIED,
                          optional: tuple[str, ...] = CARRIED_IF_PRESENT, shim: Path = SHIM_SOURCE,
                          setting: str = "families.chatterbox.model_dir") -> tuple[list[Path], list[str]]:
    """Link the published model folder's `carried` files (the VoiceEncoder and S3Gen; `optional` ones such as
    conds.pt when present) and copy the `shim` script into `output_dir`; return (paths written, lines naming
    what is missing). Defaults: the multilingual release's ve.pt, s3gen.pt (conds.pt, Cangjie5_TC.json) and
    `speak_chatterbox.py`."""
    written: list[Path] = []
    missing: list[str] = []
    if model_dir is None:
        missing.append(f"{setting} is not set: the export carries none of {', '.join(carried + optional)}")
    else:
        for name in carried + optional:
            if (model_dir / name).is_file():
                written.append(link_or_copy(model_dir / name, output_dir / name))
            elif name in carried:
                missing.append(f"{name}: {model_dir / name} (from the published folder)")
    shutil.copyfile(shim, output_dir / shim.name)  # a copy: editing the export's shim leaves LinguaForge's alone
    written.append(output_dir / shim.name)
    return written, missing

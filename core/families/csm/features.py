"""CSM features in the one feature cache (`core.data.feature_cache`): Mimi codes and the segment's text ids.

Per clip: `text_ids` (`csm.layout.segment_text_ids`), `codes` (the first codebook, one per frame) and
`depth_codes` [frames, codebooks − 1] (the rest), from the folder's own Mimi: `MimiModel` of the
config.json's `codec_config` with the `codec_model.*` tensors of `model.safetensors`, loaded strictly. Each
clip is read at Mimi's 24 kHz and encoded alone (no padding reaches its codes). Fingerprinted by the codec's
tensors and config, and the text-preparation version.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.audio import read_audio
from core.data.feature_cache import CACHE_FORMAT, Features
from core.data.manifest import ManifestRow
from core.errors import InputError
from core.families.csm.layout import segment_text_ids
from core.families.csm.model import published_keys_loaded
from core.tokenizers.tokenizer import Tokenizer

FEATURE_FORMAT = "csm-mimi-features-1"
TEXT_PREP_VERSION = "csm-text-1"
CODEC_PREFIX = "codec_model."
MIMI_RATE = 24000     # the published Mimi's sample rate …
FRAME_SAMPLES = 1920  # … and its frame: 12.5 frames a second; load_mimi refuses a codec that differs


def codec_tensors(weights: Path) -> dict[str, torch.Tensor]:
    """Return the Mimi tensors (`codec_model.*`, prefix removed) of a CSM `model.safetensors`.

    Raises InputError when the file holds none.
    """
    from safetensors import safe_open

    with safe_open(str(weights), framework="pt") as handle:
        tensors = {key[len(CODEC_PREFIX):]: handle.get_tensor(key) for key in handle.keys() if key.startswith(CODEC_PREFIX)}
    if not tensors:
        raise InputError(f"{weights}: no codec_model.* tensors; a CSM model.safetensors holds its Mimi codec. Copy the "
                         "published file again.")
    return tensors


def load_mimi(config: dict[str, Any], weights: Path) -> Any:
    """Return the folder's `MimiModel` (its config.json's `codec_config`, the `codec_model.*` tensors loaded strictly
    through transformers' key conversion) in eval mode. Raises InputError when the tensors do not fit the config, or
    the codec's rate or frame is not the published Mimi's (what the decoder and the server's frames assume)."""
    from transformers import MimiConfig, MimiModel

    mimi = MimiConfig.from_dict(config["codec_config"])
    if (mimi.sampling_rate, mimi.frame_size) != (MIMI_RATE, FRAME_SAMPLES):
        raise InputError(f"{weights}: its Mimi codec runs at {mimi.sampling_rate} Hz in frames of {mimi.frame_size} "
                         f"samples; the CSM family speaks the published Mimi's {MIMI_RATE} Hz and {FRAME_SAMPLES}-sample "
                         "frames (sesame/csm-1b): use a folder with that release's codec_config.")
    return published_keys_loaded(MimiModel, mimi, codec_tensors(weights), str(weights)).eval()


@torch.inference_mode()
def encode_clip(mimi: Any, wav: torch.Tensor, codebooks: int) -> np.ndarray:
    """Return the [frames, codebooks] Mimi codes of a 24 kHz waveform, encoded alone."""
    device = next(mimi.parameters()).device
    codes = mimi.encode(wav.reshape(1, 1, -1).to(device), num_quantizers=codebooks).audio_codes
    return codes[0].transpose(0, 1).cpu().numpy()


@dataclass
class CsmFeatures:
    """The feature-cache source of CSM: `text_ids`, `codes` (first codebook), `depth_codes` (the others)."""

    tokenizer: Tokenizer
    config: dict[str, Any]
    weights: Path
    device: torch.device
    format = CACHE_FORMAT
    label = "csm mimi codes"
    dtypes = {"text_ids": np.int32, "codes": np.int32, "depth_codes": np.int32}

    @cached_property
    def mimi(self) -> Any:
        """The folder's Mimi, loaded on the first clip that needs computing."""
        return load_mimi(self.config, self.weights).to(self.device)

    @cached_property
    def features(self) -> str:
        """The codec's fingerprint: sha256 over its config and its tensors' bytes."""
        digest = hashlib.sha256(FEATURE_FORMAT.encode())
        digest.update(json.dumps(self.config["codec_config"], sort_keys=True).encode())
        for key, tensor in sorted(codec_tensors(self.weights).items()):
            digest.update(key.encode())
            digest.update(tensor.contiguous().view(torch.uint8).numpy().tobytes())
        return digest.hexdigest()

    def fingerprint_parts(self) -> dict[str, str]:
        """Return the codec's fingerprint and the text-preparation version."""
        return {"features": self.features, "text_preparation": TEXT_PREP_VERSION}

    def featurise(self, rows: list[ManifestRow]) -> list[Features]:
        """Return each row's arrays, or why its audio is unreadable."""
        results: list[Features] = []
        codebooks = int(self.config.get("num_codebooks", 32))
        for row in rows:
            try:
                wav = read_audio(row.path, MIMI_RATE)[0]
            except InputError as exc:
                results.append(str(exc))
                continue
            frames = encode_clip(self.mimi, wav, codebooks)
            results.append({"text_ids": np.asarray(segment_text_ids(self.tokenizer, row.text)),
                            "codes": frames[:, 0], "depth_codes": frames[:, 1:]})
        return results

    def index_fields(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        """Return the family, the codec and the text-preparation version."""
        codec = self.config["codec_config"]
        return {"family": "csm", "text_preparation": TEXT_PREP_VERSION,
                "codec": {"fingerprint": self.features, "files": {"model": str(self.weights)},
                          "codebook_size": int(codec.get("codebook_size", 2048)),
                          "codebooks": int(self.config.get("num_codebooks", 32)),
                          "frame_rate": float(codec.get("frame_rate", 12.5))}}

"""Chatterbox T3 as LinguaForge builds it: the family's leaf module (the family class, speech and
export build on it; it imports none of them).

`ChatterboxConfig` is T3's size: V from the tokenizer, the Llama backbone's shape read from the
checkpoint (`backbone_shape`: layers from the `tfmr.layers.N.` keys, widths from the tensors),
registered in `LLAMA_CONFIGS` under a derived name when it differs from `Llama_520M`, so a reduced
test model and the published one go through the same code. `build_t3` returns the published `T3`
(`LinguaForgeT3` only adds a training forward; its state-dict keys are T3's) with `text_emb` /
`text_head` as `SplitEmbedding` / `SplitHead` (frozen base rows as buffers); `t3_forward` is the
training forward (losses through the module it is handed, the DDP wrapper under `torchrun`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any, Mapping

import torch
from torch import nn

from core.errors import InputError
from core.families.contract import Scored
from core.families.chatterbox.layout import IGNORE, gather_positions, lay_out_batch, next_token_targets
from models.losses import head_cross_entropy

SPEECH_CODES = 6561
#: T3's conditioning positions before the text: the speaker embedding, the perceiver's 32 latents, the emotion scalar
CONDITIONING_POSITIONS = 1 + 32 + 1
MULTILINGUAL_ROWS = 2454
MAX_TEXT_TOKENS, MAX_SPEECH_TOKENS = 2048, 4096
HEAD_DIM = 64
BASE_LLAMA = "Llama_520M"
#: the multilingual T3 releases, newest first: a folder holding more than one trains from the first it holds
#: (the published `ChatterboxMultilingualTTS.from_local(..., t3_model="v3")` reads the v3 file; both share one tokenizer)
MULTILINGUAL_T3 = {"v3": "t3_mtl23ls_v3.safetensors", "v2": "t3_mtl23ls_v2.safetensors"}
MULTILINGUAL_FILES = {"voice_encoder": "ve.pt", "t3": MULTILINGUAL_T3["v2"], "s3gen": "s3gen.pt",
                      "tokenizer": "grapheme_mtl_merged_expanded_v1.json"}
ENGLISH_FILES = {"voice_encoder": "ve.safetensors", "t3": "t3_cfg.safetensors", "s3gen": "s3gen.safetensors",
                 "tokenizer": "tokenizer.json"}
OPTIONAL_FILES = {"conds": "conds.pt"}


@dataclass
class ChatterboxConfig:
    """T3's size: vocabulary from the tokenizer, backbone shape from the checkpoint's tensors."""

    text_tokens_dict_size: int
    n_layers: int
    hidden_size: int
    intermediate_size: int
    max_text_tokens: int = MAX_TEXT_TOKENS
    max_speech_tokens: int = MAX_SPEECH_TOKENS
    speech_cond_prompt_len: int = 150
    dropout: float | None = None  # the run's `model.dropout` for every dropout of T3 (None: T3's own rates)

    @property
    def is_multilingual(self) -> bool:
        """What `T3Config.is_multilingual` says at this size (true only at 2454 rows)."""
        return self.text_tokens_dict_size == MULTILINGUAL_ROWS

    def to_dict(self) -> dict[str, Any]:
        """Return the config as JSON-ready data (recorded in checkpoint metadata)."""
        return {**asdict(self), "family": "chatterbox", "is_multilingual": self.is_multilingual}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ChatterboxConfig":
        """Return the config recorded by `to_dict`."""
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in names})


def backbone_shape(state_dict: Mapping[str, torch.Tensor], source: str) -> dict[str, int]:
    """Return {n_layers, hidden_size, intermediate_size, max_text_tokens, max_speech_tokens} read from a
    T3 state dict's keys and shapes (the position tables hold max_text + 2 and max_speech + 4 rows).

    Raises InputError when the T3 tensors are absent.
    """
    layers = {k.split(".")[2] for k in state_dict if k.startswith("tfmr.layers.")}
    gate = "tfmr.layers.0.mlp.gate_proj.weight"
    if not layers or gate not in state_dict or "text_emb.weight" not in state_dict:
        raise InputError(f"{source}: not a Chatterbox T3 checkpoint (no tfmr.layers.* / text_emb.weight); point at t3_*.safetensors.")
    shape = {"n_layers": len(layers), "hidden_size": int(state_dict["text_emb.weight"].shape[1]),
             "intermediate_size": int(state_dict[gate].shape[0])}
    if "text_pos_emb.emb.weight" in state_dict and "speech_pos_emb.emb.weight" in state_dict:
        shape["max_text_tokens"] = int(state_dict["text_pos_emb.emb.weight"].shape[0]) - 2
        shape["max_speech_tokens"] = int(state_dict["speech_pos_emb.emb.weight"].shape[0]) - 4
    return shape


def llama_config_name(config: ChatterboxConfig) -> str:
    """Return the `LLAMA_CONFIGS` name of the config's backbone (registering a derived one when needed)."""
    from chatterbox.models.t3.llama_configs import LLAMA_CONFIGS

    base = LLAMA_CONFIGS[BASE_LLAMA]
    shape = {"num_hidden_layers": config.n_layers, "hidden_size": config.hidden_size,
             "intermediate_size": config.intermediate_size}
    if all(base[k] == v for k, v in shape.items()):
        return BASE_LLAMA
    heads = config.hidden_size // HEAD_DIM
    name = f"{BASE_LLAMA}_linguaforge_{config.n_layers}x{config.hidden_size}x{config.intermediate_size}"
    LLAMA_CONFIGS.setdefault(name, {**base, **shape, "num_attention_heads": heads, "num_key_value_heads": heads})
    return name


def t3_hparams(config: ChatterboxConfig) -> Any:
    """Return the published `T3Config(text_tokens_dict_size=V)` with the config's backbone."""
    from chatterbox.models.t3.modules.t3_config import T3Config

    hp = T3Config(text_tokens_dict_size=config.text_tokens_dict_size)
    hp.llama_config_name = llama_config_name(config)
    hp.max_text_tokens, hp.max_speech_tokens = config.max_text_tokens, config.max_speech_tokens
    return hp


class TrainingForward:
    """What a trainable T3 adds to the published class, for both T3 families: `model(batch=…)` returns its
    `training_losses(batch)` (through the module the trainer hands it: the DDP wrapper under `torchrun`);
    any other call is the published forward."""

    def forward(self, batch: dict[str, torch.Tensor] | None = None, **kwargs: Any) -> Any:  # noqa: D102
        if batch is None:
            return super().forward(**kwargs)  # type: ignore[misc]
        return self.training_losses(batch)  # type: ignore[attr-defined]


@lru_cache(maxsize=None)
def _trainable_t3_class() -> type:
    from chatterbox.models.t3 import T3

    class LinguaForgeT3(TrainingForward, T3):
        """The published T3 with a training forward: `model(batch=…)` returns the losses."""

        def training_losses(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            """Return text_loss, mel_loss (speech tokens) and mel_top1 (means) and the tokens they score,
            `text_tokens` and `mel_tokens`, for a batch from `collate`."""
            layout = lay_out_batch(self, batch)
            text = batch["text_ids"]
            return layout_losses(self, layout, batch, (layout.text_start, text.size(1) - 1),
                                 next_token_targets(text, batch["text_lengths"]))

    return LinguaForgeT3


def layout_losses(t3: Any, layout: Any, batch: dict[str, torch.Tensor], text_positions: tuple[torch.Tensor, int],
                  text_targets: torch.Tensor) -> dict[str, torch.Tensor]:
    """Return text_loss, mel_loss, mel_top1 (means) and the tokens they score (`text_tokens`, `mel_tokens`) of a
    laid-out batch (`BatchLayout`): the backbone over
    the embeddings with the mask, the text head at `text_positions` (each row's first scored position, the
    count) against `text_targets`, the speech head from each start-of-speech token against the next speech
    tokens. Shared by every T3 layout (the multilingual one and Turbo's)."""
    hidden = t3.tfmr(inputs_embeds=layout.embeds, attention_mask=layout.mask, use_cache=False,
                     return_dict=True).last_hidden_state
    speech = batch["codes"]
    speech_targets = next_token_targets(speech, batch["code_lengths"])
    text_losses, _ = head_cross_entropy(t3.text_head, gather_positions(hidden, *text_positions), text_targets, IGNORE)
    mel_losses, mel_best = head_cross_entropy(t3.speech_head, gather_positions(hidden, layout.speech_start, speech.size(1) - 1),
                                              speech_targets, IGNORE)
    text_tokens, scored = (text_targets != IGNORE).sum(), speech_targets != IGNORE
    mel_tokens = scored.sum()
    top1 = (mel_best == speech_targets)[scored].float().mean()
    return {"text_loss": text_losses.sum() / text_tokens, "mel_loss": mel_losses.sum() / mel_tokens, "mel_top1": top1.detach(),
            "text_tokens": text_tokens, "mel_tokens": mel_tokens}


def build_t3(config: ChatterboxConfig, frozen_rows: int = 0) -> nn.Module:
    """Return a random-initialised `LinguaForgeT3` (a T3) whose first `frozen_rows` text rows are frozen buffers
    (every dropout at `config.dropout` when set)."""
    return split_t3_text_rows(_trainable_t3_class()(t3_hparams(config)), frozen_rows, config.dropout)


def split_t3_text_rows(model: nn.Module, frozen_rows: int, dropout: float | None) -> nn.Module:
    """Return a T3 (Llama or GPT-2) with its first `frozen_rows` text rows as frozen buffers (`text_emb`,
    `text_head`) and every dropout at `dropout` when set."""
    from core.families.base import set_dropout
    from models.rows import SplitEmbedding, SplitHead

    if dropout is not None:
        set_dropout(model, dropout)
    model.text_emb = SplitEmbedding.from_module(model.text_emb, frozen_rows)
    model.text_head = SplitHead.from_module(model.text_head, frozen_rows)
    return model


def t3_forward(module: nn.Module, batch: dict[str, torch.Tensor]) -> Scored:
    """Return `text_loss`, `mel_loss` and `mel_top1` of a T3 (or its DDP wrapper) on a batch, with the tokens each scores."""
    out = module(batch=batch)
    return {"text_loss": (out["text_loss"], out["text_tokens"]), "mel_loss": (out["mel_loss"], out["mel_tokens"]),
            "mel_top1": (out["mel_top1"], out["mel_tokens"])}

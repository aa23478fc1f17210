"""Chatterbox-Turbo and Nano's T3 as LinguaForge builds it: the family's leaf module.

The published `T3` built the Turbo way (`ChatterboxTurboTTS.from_local`): a GPT-2 backbone
(`GPT2_medium` 24 × 1024 for Turbo, `GPT2_small` 12 × 768 for Nano), GPT-2's own position table
(`input_pos_emb = None`), 6,563 speech rows, a 375-token prompt, no perceiver, no emotion input, a
speech head with bias. `TurboConfig` is its size: V from the tokenizer, the backbone read from the
checkpoint (`backbone_shape`: layers from the `tfmr.h.N.` keys, width from the tensors, the
position and GPT-2 token tables' rows), registered in `LLAMA_CONFIGS` under a derived name when it
is neither published shape, so a reduced test model and the published one load through the same
code. Turbo and Nano are told apart by the width (Nano's is GPT-2 small's 768).

`build_turbo_t3` returns `LinguaForgeTurboT3` (T3's keys; `model(batch=…)` returns the losses, which
the multilingual family's `t3_forward` weights through the module the trainer hands it)
with `text_emb` / `text_head` split into frozen base rows and trainable rows, and GPT-2's own token
table `tfmr.wte` (which T3 never reads: it feeds `inputs_embeds`) kept as a buffer, so the state
dict loads strictly into the published class while no optimizer sees a tensor without gradient.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any, Mapping

import torch
from torch import nn

from core.errors import InputError
from core.families.chatterbox.t3 import TrainingForward, layout_losses, split_t3_text_rows
from core.families.chatterbox_turbo.layout import PROMPT_TOKENS, lay_out_batch, text_targets

PUBLISHED_TEXT_ROWS = 50276  # GPT-2's 50,257 ids + 19 tags: what `from_local` hard-codes
SPEECH_ROWS = 6563           # 6,561 S3 codes, start 6561, stop 6562
MAX_TEXT_TOKENS, MAX_SPEECH_TOKENS = 2048, 4096
HEAD_DIM = 64
NANO_WIDTH = 768             # GPT-2 small's width: a Nano checkpoint
PUBLISHED_BACKBONES = {"turbo": "GPT2_medium", "nano": "GPT2_small"}
T3_FILES = {"turbo": "t3_turbo_v1.safetensors", "nano": "t3_nano_v1.safetensors"}


@dataclass
class TurboConfig:
    """T3's size the Turbo way: vocabulary from the tokenizer, backbone shape from the checkpoint's tensors."""

    text_tokens_dict_size: int
    n_layers: int
    hidden_size: int
    n_positions: int = 8196
    wte_rows: int = PUBLISHED_TEXT_ROWS
    max_text_tokens: int = MAX_TEXT_TOKENS
    max_speech_tokens: int = MAX_SPEECH_TOKENS
    speech_cond_prompt_len: int = PROMPT_TOKENS
    dropout: float | None = None  # the run's `model.dropout` for every dropout of the T3 (None: GPT-2's own rates)

    @property
    def variant(self) -> str:
        """`nano` for GPT-2 small's width (768), else `turbo`."""
        return "nano" if self.hidden_size == NANO_WIDTH else "turbo"

    def to_dict(self) -> dict[str, Any]:
        """Return the config as JSON-ready data (recorded in checkpoint metadata)."""
        return {**asdict(self), "family": "chatterbox-turbo", "variant": self.variant}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TurboConfig":
        """Return the config recorded by `to_dict`."""
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


def backbone_shape(state_dict: Mapping[str, torch.Tensor], source: str) -> dict[str, int]:
    """Return {n_layers, hidden_size, n_positions, wte_rows, max_text_tokens, max_speech_tokens} read from a
    Turbo/Nano T3 state dict (GPT-2 layers `tfmr.h.N.*`, position table `tfmr.wpe.weight`): the published
    8,196 positions hold 2,048 text and 4,096 speech tokens after the 375-token prompt; fewer positions
    (a reduced model) hold a third of what is left as text, the rest as speech.

    Raises InputError when the GPT-2 T3 tensors are absent (a multilingual T3 is named as such).
    """
    layers = {k.split(".")[2] for k in state_dict if k.startswith("tfmr.h.")}
    if not layers or "tfmr.wpe.weight" not in state_dict or "text_emb.weight" not in state_dict:
        llama = any(k.startswith("tfmr.layers.") for k in state_dict)
        hint = " It is a Llama T3: use family chatterbox." if llama else ""
        raise InputError(f"{source}: not a Chatterbox-Turbo/Nano T3 (no tfmr.h.* / tfmr.wpe.weight / text_emb.weight); "
                         f"point at t3_turbo_v1.safetensors or t3_nano_v1.safetensors.{hint}")
    positions = int(state_dict["tfmr.wpe.weight"].shape[0])
    wte = state_dict.get("tfmr.wte.weight")
    room = max(2, positions - 1 - PROMPT_TOKENS - 1)  # GPT-2's positions left after speaker, prompt and start of speech
    max_text = min(MAX_TEXT_TOKENS, room // 3)
    return {"n_layers": len(layers), "hidden_size": int(state_dict["text_emb.weight"].shape[1]), "n_positions": positions,
            "wte_rows": int(wte.shape[0]) if wte is not None else PUBLISHED_TEXT_ROWS,
            "max_text_tokens": max_text, "max_speech_tokens": min(MAX_SPEECH_TOKENS, room - max_text)}


def gpt2_config_name(config: TurboConfig) -> str:
    """Return the `LLAMA_CONFIGS` name of the config's GPT-2 backbone (registering a derived one when it is
    neither GPT2_medium nor GPT2_small)."""
    from chatterbox.models.t3.llama_configs import LLAMA_CONFIGS

    shape = {"n_layer": config.n_layers, "n_embd": config.hidden_size, "hidden_size": config.hidden_size,
             "n_head": max(1, config.hidden_size // HEAD_DIM), "n_positions": config.n_positions,
             "n_ctx": config.n_positions, "vocab_size": config.wte_rows}
    for name in PUBLISHED_BACKBONES.values():
        if all(LLAMA_CONFIGS[name].get(k) == v for k, v in shape.items()):
            return name
    name = f"GPT2_linguaforge_{config.n_layers}x{config.hidden_size}x{config.n_positions}x{config.wte_rows}"
    LLAMA_CONFIGS.setdefault(name, {**LLAMA_CONFIGS[PUBLISHED_BACKBONES["turbo"]], **shape})
    return name


def turbo_hparams(config: TurboConfig) -> Any:
    """Return the published `T3Config` as `ChatterboxTurboTTS.from_local` sets it, at the config's size and backbone."""
    from chatterbox.models.t3.modules.t3_config import T3Config

    hp = T3Config(text_tokens_dict_size=config.text_tokens_dict_size)
    hp.llama_config_name = gpt2_config_name(config)
    hp.speech_tokens_dict_size = SPEECH_ROWS
    hp.input_pos_emb = None
    hp.speech_cond_prompt_len = config.speech_cond_prompt_len
    hp.use_perceiver_resampler = False
    hp.emotion_adv = False
    hp.max_text_tokens, hp.max_speech_tokens = config.max_text_tokens, config.max_speech_tokens
    return hp


class UnreadTable(nn.Module):
    """GPT-2's token table, which T3 never reads (it feeds `inputs_embeds`): a buffer under `<prefix>weight`,
    so the state dict holds `tfmr.wte.weight` for the published strict load and no optimizer sees it."""

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("weight", weight.detach().clone())


@lru_cache(maxsize=None)
def _trainable_class() -> type:
    from chatterbox.models.t3 import T3

    class LinguaForgeTurboT3(TrainingForward, T3):
        """The published T3 built the Turbo way, with a training forward: `model(batch=…)` returns the losses."""

        def training_losses(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            """Return text_loss, mel_loss (speech tokens) and mel_top1 (means) and the tokens they score, `text_tokens`
            and `mel_tokens`, for a batch from the layout's `collate`: each text id scored from the position before
            it, each speech token and the stop token from theirs."""
            layout = lay_out_batch(self, batch)
            text = batch["text_ids"]
            return layout_losses(self, layout, batch, (layout.text_start - 1, text.size(1)),
                                 text_targets(text, batch["text_lengths"]))

    return LinguaForgeTurboT3


def build_turbo_t3(config: TurboConfig, frozen_rows: int = 0) -> nn.Module:
    """Return a random-initialised `LinguaForgeTurboT3` whose first `frozen_rows` text rows are frozen buffers
    (every dropout at `config.dropout` when set)."""
    model = _trainable_class()(turbo_hparams(config))
    model.tfmr.wte = UnreadTable(model.tfmr.wte.weight)
    return split_t3_text_rows(model, frozen_rows, config.dropout)

"""Chatterbox-Turbo and Nano (chatterbox-light's `ChatterboxTurboTTS`) as a LinguaForge model family.

What is identical to the multilingual family is its code: the feature models, the voice-prompt maker and
the feature cache (`chatterbox.feature_models`, `chatterbox.features`, with Turbo's prompt and text), the
conditioning and the padded batch (`chatterbox.layout`), the training forward and the split text rows
(`chatterbox.t3`), the speaker's base (`chatterbox.speech.T3Speaker`), the sampler's common options
(`chatterbox.decode.T3Sampling`), the training loop's hooks (`ChatterboxFamily`, which this class extends). What
differs lives here: the GPT-2 T3 (`chatterbox_turbo.t3`), its one sequence layout
(`chatterbox_turbo.layout`: no start/stop text tokens, GPT-2's own positions, a 375-token prompt),
the decoder, the meanflow speaker, the published files (`ve.safetensors`, `t3_turbo_v1.safetensors`
or `t3_nano_v1.safetensors`, `s3gen_meanflow.safetensors`, GPT-2's tokenizer folder) and the export.

Turbo and Nano are one family told apart by the checkpoint's shapes (Nano: GPT-2 small's width 768).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import torch

from core.errors import InputError
from core.families import get_family
from core.families.base import TEMPERATURE, FamilyRun, MemoryShape
from core.families.chatterbox.family import ChatterboxFamily
from core.families.chatterbox.t3 import t3_forward
from core.families.chatterbox_turbo.layout import LAYOUT, collate
from core.families.releases import pull_command
from core.families.chatterbox_turbo.t3 import (
    NANO_WIDTH, PUBLISHED_BACKBONES, PUBLISHED_TEXT_ROWS, SPEECH_ROWS, T3_FILES, TurboConfig, backbone_shape, build_turbo_t3,
    gpt2_config_name, turbo_hparams,
)
from core.numbers import NumberRange
from core.tokenizers.hf_folder import SLOW_FILES, TOKENIZER_JSON

VOICE_FILES = {"voice_encoder": "ve.safetensors", "s3gen": "s3gen_meanflow.safetensors"}
OPTIONAL_FILES = {"conds": "conds.pt"}
SHIM_NAME = "speak_chatterbox_turbo.py"

#: the published call that decodes in the trained layout (export notes, docs/chatterbox-turbo.md)
PUBLISHED_INFERENCE = (
    "ChatterboxTurboTTS.generate(text, top_k=1, top_p=1.0, repetition_penalty=1.0, temperature=1.0) — i.e. "
    "T3.inference_turbo(t3_cond, text_tokens=tokenizer(punc_norm(text)).input_ids, temperature=1.0, top_k=1, "
    "top_p=1.0, repetition_penalty=1.0): the layout is the one generate() uses (the text ids as they are, one "
    "start-of-speech token, GPT-2's positions, KV cache), and top_k=1 picks the most likely token. Put the "
    "language tag in front of the text ('[am]…'). The default generate() samples (temperature 0.8, top-k 1000, "
    "top-p 0.95, repetition penalty 1.2) in the same layout."
)


class ChatterboxTurboFamily(ChatterboxFamily):
    """Chatterbox-Turbo / Nano T3 through the family interface."""

    name = "chatterbox-turbo"
    layout = get_family("chatterbox-turbo")
    sequence_layout = LAYOUT
    speech_options = {  # `ChatterboxTurboTTS.generate`'s sampling (no CFG, min_p or exaggeration) and S3Gen's steps
        "temperature": TEMPERATURE, "top_k": NumberRange(0, 100_000, integer=True),
        "top_p": NumberRange(0.0, 1.0, low_open=True), "repetition_penalty": NumberRange(0.0, 10.0, low_open=True),
        "cfm_steps": NumberRange(1, 100, integer=True),
    }
    lora_targets = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")
    tokenizer_role = "tokenizer"  # the model folder itself: AutoTokenizer's GPT-2 files
    marker_releases = {T3_FILES["turbo"]: "chatterbox-turbo", T3_FILES["nano"]: "chatterbox-nano"}
    marker_names = tuple(marker_releases)
    t3_backbone = ("tfmr.h.", "GPT-2")
    config_class = TurboConfig
    build_t3 = staticmethod(build_turbo_t3)

    # -- files ------------------------------------------------------------------------------
    def published_names(self, model_dir: Path) -> dict[str, str]:
        """Return {role: name} of the release in `model_dir`: Turbo's T3 (Nano's when only that is there), the
        voice encoder, the meanflow S3Gen and the tokenizer files (`tokenizer.json`, else GPT-2's vocab + merges)."""
        t3 = T3_FILES["nano"] if (model_dir / T3_FILES["nano"]).is_file() and not (model_dir / T3_FILES["turbo"]).is_file() \
            else T3_FILES["turbo"]
        tokenizer = {"tokenizer_json": TOKENIZER_JSON} if (model_dir / TOKENIZER_JSON).is_file() else \
            {f"tokenizer_{Path(name).stem}": name for name in SLOW_FILES}
        return {"voice_encoder": VOICE_FILES["voice_encoder"], "t3": t3, "s3gen": VOICE_FILES["s3gen"], **tokenizer}

    def published_files(self, model_dir: Path) -> dict[str, Path]:
        """Return {role: path} of the release in `model_dir`, `tokenizer` being the folder itself (what
        `AutoTokenizer.from_pretrained` reads), `conds` when present.

        Raises InputError naming the first missing file and every name expected.
        """
        names = self.published_names(model_dir)
        for role, name in names.items():
            if not (model_dir / name).is_file():
                raise InputError(
                    f"{model_dir / name}: missing from the Chatterbox-Turbo folder {model_dir} (the {role}). It must hold "
                    f"{', '.join(names.values())} as published (t3_nano_v1.safetensors for Nano): "
                    f"`{pull_command(self.release_of(model_dir) or 'chatterbox-turbo')}`."
                )
        files = {role: model_dir / name for role, name in names.items()}
        files["tokenizer"] = model_dir
        files.update({role: model_dir / n for role, n in OPTIONAL_FILES.items() if (model_dir / n).is_file()})
        return files

    def check_t3_width(self, t3: Path, width: int, pull: str) -> None:
        """Return None when the T3's width matches its name: GPT-2 small's (768) for Nano's T3, another for Turbo's.

        Raises InputError naming the T3, its width and the pull command otherwise.
        """
        variant = "nano" if width == NANO_WIDTH else "turbo"
        if t3.name != T3_FILES[variant]:
            raise InputError(f"{t3}: {width} wide, so a {variant.capitalize()} T3 (Nano is GPT-2 small's {NANO_WIDTH}), "
                             f"though named {t3.name}; pull the release whole: `{pull}`.")

    @staticmethod
    def read_backbone(state_dict: Mapping[str, torch.Tensor], source: str) -> dict[str, int]:
        """Return the GPT-2 backbone shape of a Turbo/Nano T3 state dict (`chatterbox_turbo.t3.backbone_shape`)."""
        return backbone_shape(state_dict, source)

    # -- data -------------------------------------------------------------------------------
    def features_source(self, run: FamilyRun, device: torch.device) -> Any:
        """Return Turbo's feature-cache source (`chatterbox_turbo.features.TurboFeatures`)."""
        from core.families.chatterbox_turbo.features import TurboFeatures

        return TurboFeatures(run.tokenizer, self.published_files(run.model_dir), device)

    def training_functions(self, run: FamilyRun) -> tuple[Any, Any, dict[str, float]]:
        """Return (collate, forward, loss weights) of Turbo's one sequence layout (the run's text and speech weights)."""
        return collate, t3_forward, {"text_loss": run.text_weight, "mel_loss": run.mel_weight}

    def memory_shape(self, model_config: Mapping[str, Any]) -> MemoryShape:
        """Return the GPT-2 T3's shape for the memory plan: GPT-2 blocks as its `LLAMA_CONFIGS` entry sets them (MLP
        4 × width, attention dropout 0.1 unless the run sets `model.dropout`), the speaker position and the prompt's
        speech tokens as conditioning, the text as it is (no start/stop), speech in start/stop."""
        from chatterbox.models.t3.llama_configs import LLAMA_CONFIGS

        config = TurboConfig.from_dict(model_config)
        gpt2 = LLAMA_CONFIGS[gpt2_config_name(config)]
        return MemoryShape(block="gpt2", layers=config.n_layers, width=config.hidden_size, heads=int(gpt2["n_head"]),
                           mlp_width=int(gpt2.get("n_inner") or 4 * config.hidden_size), text_rows=config.text_tokens_dict_size,
                           speech_rows=SPEECH_ROWS, conditioning=1 + config.speech_cond_prompt_len, text_extra=0, speech_extra=2,
                           attention_dropout=float(gpt2["attn_pdrop"]) if config.dropout is None else config.dropout)

    # -- export and speech ------------------------------------------------------------------
    def export(self, checkpoint: Path, output_dir: Path, name: str | None, settings: Any) -> list[Path]:
        """Write a folder the published `ChatterboxTurboTTS` speaks from: `t3_turbo_v1.safetensors` (or
        `t3_nano_v1.safetensors`; loads strictly into T3 built the Turbo way at the new size), the tokenizer as an
        `AutoTokenizer` folder (tokenizer.json, tokenizer_config.json), `linguaforge.json`, `speak_chatterbox_turbo.py`
        and the model folder's ve.safetensors, s3gen_meanflow.safetensors and conds.pt (hard links); return the paths.

        Raises InputError when the checkpoint is not a LinguaForge chatterbox-turbo checkpoint or its tokenizer is not found.
        """
        from core.checkpoint import load_checkpoint, save_checkpoint
        from core.families.chatterbox.published import carry_published_files
        from core.families.chatterbox_turbo.text import tokenizer_tags
        from core.fsutil import atomic_write_json
        from core.inference import resolve_tokenizer
        from chatterbox.models.t3.llama_configs import LLAMA_CONFIGS

        from core.tokenizers.hf_folder import folder_tokenizer_json, write_tokenizer_folder

        loaded = load_checkpoint(checkpoint)
        meta = loaded.meta or {}
        if meta.get("family") != self.name:
            raise InputError(f"{checkpoint}: family {meta.get('family')!r}, not {self.name}; export the checkpoint of a "
                             f"{self.name} run.")
        tokenizer = resolve_tokenizer(loaded, settings)
        config = TurboConfig(text_tokens_dict_size=int(loaded.state_dict[self.layout.embedding_key].shape[0]),
                             **backbone_shape(loaded.state_dict, str(checkpoint)))
        output_dir.mkdir(parents=True, exist_ok=True)
        t3_path = save_checkpoint(output_dir / T3_FILES[config.variant], loaded.state_dict, meta)
        text = folder_tokenizer_json(tokenizer.path) if tokenizer.path.is_dir() else tokenizer.path.read_text(encoding="utf-8")
        folder = write_tokenizer_folder(text, output_dir)
        model_dir = (settings.get(f"families.{self.name}") or {}).get("model_dir")
        carried, missing = carry_published_files(
            Path(model_dir).expanduser() if model_dir else None, output_dir, tuple(VOICE_FILES.values()),
            tuple(OPTIONAL_FILES.values()), Path(__file__).resolve().parent / SHIM_NAME, f"families.{self.name}.model_dir")
        hp = turbo_hparams(config)
        published = hp.llama_config_name == PUBLISHED_BACKBONES[config.variant]
        note = {
            **meta,
            "t3_file": t3_path.name,
            "tokenizer_folder": ".",
            "text_tokens_dict_size": config.text_tokens_dict_size,
            "variant": config.variant,
            **({} if published else {"t3_backbone": {"llama_config_name": hp.llama_config_name,
                                                     "llama_config": dict(LLAMA_CONFIGS[hp.llama_config_name])}}),
            "language_tags": sorted(tokenizer_tags(tokenizer)),
            "load_with": (f"T3 built as ChatterboxTurboTTS.from_local builds it, with T3Config(text_tokens_dict_size="
                          f"{config.text_tokens_dict_size}), then load_state_dict(load_file('{t3_path.name}'), strict=True); "
                          f"from_local hard-codes {PUBLISHED_TEXT_ROWS} rows, so use {SHIM_NAME} (load_published) or "
                          f"`python -m core synthesize`."),
            "layout": LAYOUT,
            "published_inference": PUBLISHED_INFERENCE,
            "speak_with": (f"python {SHIM_NAME} --text … [--language {{tag}}] --output out.wav [--reference voice.wav] "
                           "[--greedy]  (in this folder): builds the grown T3, then the published generate()"),
            "missing_for_published_inference": missing,
        }
        note_path = atomic_write_json(output_dir / "linguaforge.json", note)
        return [t3_path, folder / "tokenizer.json", folder / "tokenizer_config.json", note_path, *carried]

    def load_speaker(self, checkpoint: Any, tokenizer: Path | None, model_dir: Path | None, settings: Any,
                     device: str = "auto") -> Any:
        """Return a TurboSpeaker: T3 + the one-step meanflow S3Gen (24 kHz) from the model folder."""
        from core.families.chatterbox_turbo.speech import TurboSpeaker

        return TurboSpeaker(self, checkpoint, tokenizer, model_dir, settings, device)

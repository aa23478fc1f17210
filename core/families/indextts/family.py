"""IndexTTS2's GPT as a LinguaForge model family: the `IndexTTSFamily` class.

It builds on the family's modules — `indextts.gpt` (the leaf: file names, config.yaml, the
backbone shape, building and loading `UnifiedVoice`, the text normaliser), `indextts.data`
(features), `indextts.training` (samples, collate, loss), `indextts.export`, `indextts.speech` —
none of which imports this one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import torch

from core.errors import InputError
from core.numbers import NumberRange
from core.families import rows_for
from core.families.base import TEMPERATURE, MemoryShape, ModelFamily, checkpoint_hf_blocks
from core.families.releases import pull_command
from core.families.rows import text_rows
from core.families.indextts.gpt import (
    BPE_NAME,
    CONDITIONING_LATENTS,
    CONFIG_NAME,
    GPT_NAME,
    IndexTTSModelConfig,
    ROWS,
    SEMANTIC_CODES_PER_SECOND,
    SEQUENCE_LAYOUT,
    STATS_NAME,
    gpt_kwargs_from_state_dict,
    read_indextts_config,
)


class IndexTTSFamily(ModelFamily):
    """IndexTTS2's GPT behind the family interface (see the module docstring)."""

    name = "indextts"
    start_role = "gpt"  # the published GPT (config `gpt_checkpoint`, normally gpt.pth)
    tokenizer_role = "bpe"  # the published SentencePiece model (config `dataset.bpe_model`, normally bpe.model)
    marker_releases = {GPT_NAME: "indextts2"}
    marker_names = tuple(marker_releases)
    sequence_layout = SEQUENCE_LAYOUT
    speech_options = {"temperature": TEMPERATURE, "max_mel_tokens": NumberRange(1, 10_000, integer=True),
                      "diffusion_steps": NumberRange(1, 200, integer=True)}
    lora_targets = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")
    tasks = ("tts",)
    model_keys = ("preset", "number_text_tokens", "dropout")  # number_text_tokens: the size the doctor checks
    # the conditioning and emotion encoders: their outputs (latents, emotion vector) come from the feature cache
    unused_in_training = ("conditioning_encoder", "perceiver_encoder", "emo_conditioning_encoder", "emo_perceiver_encoder",
                          "emovec_layer", "emo_layer")
    speech_tokens_per_second = SEMANTIC_CODES_PER_SECOND

    def __init__(self) -> None:
        from core.families import get_family

        self.layout = get_family("indextts")

    # -- files ------------------------------------------------------------------------------
    def published_names(self, model_dir: Path) -> dict[str, str]:
        """Return {role: name} of config.yaml, the GPT checkpoint, bpe.model and the w2v-BERT stats, as the
        folder's config.yaml names them (the published names without one).

        Raises InputError when config.yaml is there but unreadable.
        """
        path = Path(model_dir) / CONFIG_NAME
        config = read_indextts_config(path) if path.is_file() else {}
        return {
            "config": CONFIG_NAME,
            "gpt": config.get("gpt_checkpoint", GPT_NAME),
            "bpe": config.get("dataset", {}).get("bpe_model", BPE_NAME),
            "w2v_stats": config.get("w2v_stat", STATS_NAME),
        }

    def published_files(self, model_dir: Path) -> dict[str, Path]:
        """Return {role: path} of config.yaml, the GPT checkpoint, bpe.model and the w2v-BERT stats.

        Raises InputError naming the first missing one and where IndexTTS2 expects it.
        """
        read_indextts_config(Path(model_dir) / CONFIG_NAME)  # a missing or foreign config.yaml is named first
        found = {}
        for role, name in self.published_names(model_dir).items():
            path = Path(model_dir) / name
            if not path.is_file():
                raise InputError(f"{path}: missing; IndexTTS2 expects {name} in its model folder {model_dir}: "
                                 f"`{pull_command('indextts2')}`.")
            found[role] = path
        return found

    def check_release(self, files: Mapping[str, Path]) -> str:
        """Return what the GPT holds (text rows = bpe.model's pieces + 1 = config.yaml's `number_text_tokens` + 1),
        read from the memory-mapped checkpoint, the SentencePiece model and the config.

        Raises InputError naming the file that disagrees and the pull command.
        """
        from core.checkpoint import tensor_shapes
        from core.tokenizers.tokenizer import load_tokenizer

        size = load_tokenizer(files["bpe"]).size
        declared = read_indextts_config(files["config"]).get("gpt", {}).get("number_text_tokens")
        rows = tensor_shapes(files["gpt"]).get(ROWS.embedding_key, (None,))[0]
        if rows != size + ROWS.row_offset:
            raise InputError(f"{files['gpt']}: {rows} text rows ({ROWS.embedding_key}), but {files['bpe'].name} has {size} "
                             f"pieces (the GPT holds pieces + {ROWS.row_offset}); pull the release whole: `{pull_command('indextts2')}`.")
        if declared != size:
            raise InputError(f"{files['config']}: gpt.number_text_tokens is {declared}, {files['bpe'].name} has {size} pieces; "
                             f"pull the release whole: `{pull_command('indextts2')}`.")
        return f"GPT {files['gpt'].name}: {rows} text rows = {files['bpe'].name}'s {size} pieces + {ROWS.row_offset}"

    def base_size(self, base: Any) -> int | None:
        """Return the base-language token count: the metadata's `base_size`, else the published rows − 1."""
        if base is None:
            return None
        meta = base.meta or {}
        if meta.get("base_size") is not None:
            return int(meta["base_size"])
        return text_rows(ROWS, base.state_dict) - ROWS.row_offset if ROWS.embedding_key in base.state_dict else None

    # -- the model --------------------------------------------------------------------------
    def _indextts_config(self, run: Any) -> dict[str, Any]:
        saved = run.base_meta.get("model_config") if run.base is not None else None
        if run.model_dir is not None:
            return read_indextts_config(Path(run.model_dir) / CONFIG_NAME)
        if saved:
            return IndexTTSModelConfig.from_dict(saved).indextts_config
        raise InputError(
            f"{run.source}: family indextts needs `model_dir:` (the local IndexTTS2 folder with config.yaml) "
            "or `families.indextts.model_dir` in the settings."
        )

    def model_config(self, run: Any) -> IndexTTSModelConfig:
        """Return the UnifiedVoice config: V from the tokenizer, the backbone shape from the base checkpoint's tensors.

        Raises InputError for `model:` keys other than `model_keys` and without a base checkpoint.
        """
        self.check_model_keys(run.model, run.source)
        if run.base is None:
            raise InputError(f"{run.source}: family indextts trains from a checkpoint; set base_checkpoint or model_dir.")
        config = self._indextts_config(run)
        return IndexTTSModelConfig(gpt_kwargs_from_state_dict(run.base.state_dict, config, run.tokenizer.size), config,
                                   self.training_dropout(run.model, run.source))

    def build_model(self, model_config: Any, frozen_rows: int) -> torch.nn.Module:
        """Return a UnifiedVoice whose first `frozen_rows` text rows and the extra row are frozen buffers (every
        dropout at the run's `model.dropout` when set)."""
        from core.families.base import set_dropout
        from core.families.indextts.training import build_trainable_gpt

        if isinstance(model_config, Mapping):
            model_config = IndexTTSModelConfig.from_dict(model_config)
        model = build_trainable_gpt(model_config.kwargs, frozen_rows)
        if model_config.dropout is not None:
            set_dropout(model, model_config.dropout)
        return model

    def memory_shape(self, model_config: Mapping[str, Any]) -> MemoryShape:
        """Return the GPT's shape for the memory plan: GPT-2 blocks as `build_hf_gpt_transformer` configures them
        (its GPT2Config defaults: MLP 4 × width, attention dropout), 34 conditioning positions, text wrapped in
        start/stop, speech after its start token, and whether the config's `gpt.checkpointing` (UnifiedVoice's
        default: on) recomputes the blocks."""
        import inspect

        from indextts.gpt.model_v2 import UnifiedVoice
        from transformers import GPT2Config

        config = IndexTTSModelConfig.from_dict(model_config)
        kwargs = config.kwargs
        published = GPT2Config()
        width = int(kwargs["model_dim"])
        recomputes = kwargs.get("checkpointing", inspect.signature(UnifiedVoice).parameters["checkpointing"].default)
        return MemoryShape(block="gpt2", layers=int(kwargs["layers"]), width=width, heads=int(kwargs["heads"]),
                           mlp_width=published.n_inner or 4 * width, text_rows=rows_for(ROWS, int(kwargs["number_text_tokens"])),
                           speech_rows=int(kwargs["number_mel_codes"]), conditioning=CONDITIONING_LATENTS + 2, text_extra=2,
                           speech_extra=1,
                           attention_dropout=published.attn_pdrop if config.dropout is None else config.dropout, recomputes=bool(recomputes))

    def enable_activation_checkpointing(self, model: torch.nn.Module) -> bool:
        """Checkpoint every GPT-2 block of the backbone (`gpt`), as `gpt.checkpointing: true` does."""
        return checkpoint_hf_blocks(model.gpt)

    def text_row_modules(self, model: torch.nn.Module) -> list[Any]:
        """Return [text_embedding, text_head]."""
        return [model.text_embedding, model.text_head]

    # -- data -------------------------------------------------------------------------------
    def prepare_features(self, run: Any) -> Path:
        """Return the IndexTTS2 feature cache of the run's manifest (built or completed now)."""
        from core.families.indextts.data import prepare_features

        return prepare_features(self, run)

    def feature_fingerprint(self, run: Any) -> str | None:
        """Return the fingerprint of the feature models (w2v-BERT, stats, semantic codec, base GPT)."""
        return run.extra.get("feature_fingerprint")

    def task_data(self, run: Any, model_config: Any, cache_dir: Path | None) -> Any:
        """Return the TaskData: prompt-paired cache samples, IndexTTS2's collate and its 0.2/0.8 loss."""
        from core.families.indextts.training import collate_indextts, indextts_forward, paired_samples
        from core.families.contract import TaskData

        splits = paired_samples(cache_dir, model_config.max_text_tokens, model_config.max_speech_tokens)
        return TaskData(splits["train"], splits["val"], collate_indextts, indextts_forward,
                        {"text_loss": run.text_weight, "mel_loss": run.mel_weight})

    # -- export and speech ------------------------------------------------------------------
    def export(self, checkpoint: Path, output_dir: Path, name: str | None, settings: Any) -> list[Path]:
        """Write `gpt_<name>.pth`, the corrected `config.yaml`, `<name>.model` and `linguaforge.json`."""
        from core.families.indextts.export import export_indextts

        return export_indextts(checkpoint, output_dir, name, settings)

    def speech_files(self, model_dir: Path, settings: Any) -> dict[str, Path]:
        """Return the files IndexTTS2 synthesis reads (s2mel.pth, CAMPPlus, BigVGAN, w2v-BERT, the semantic codec, …).

        Raises InputError naming the first missing one, where IndexTTS2 expects it and the override to set.
        """
        from core.families.indextts.speech import speech_files

        return speech_files(model_dir, settings)

    def load_speaker(self, checkpoint: Any, tokenizer: Path | None, model_dir: Path | None, settings: Any,
                     device: str = "auto") -> Any:
        """Return an IndexTTSSpeaker: GPT → s2mel → BigVGAN (22.05 kHz) with the folder's models."""
        from core.families.indextts.speech import IndexTTSSpeaker

        return IndexTTSSpeaker(checkpoint, tokenizer, model_dir, settings, device)

    def synthesize(self, request: Any, settings: Any) -> dict[str, Any]:
        """Refuse a request without a reference before any model loads; otherwise speak as every family does."""
        if request.reference is None:
            raise InputError("IndexTTS2 speaks in a reference voice: pass --reference WAV (a few seconds of the speaker).")
        return super().synthesize(request, settings)

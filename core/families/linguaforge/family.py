"""LinguaForge's own GPT models (`task: lm | tts`) behind the family interface: today's code paths."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from torch import nn

from core.errors import InputError
from core.families import get_family
from core.families.base import FamilyRun, MemoryShape, ModelFamily


class LinguaForgeFamily(ModelFamily):
    """The own models: sized from the tokenizer and a `model:` shape, codec-coded speech for tts."""

    name = "linguaforge"
    layout = get_family("linguaforge")
    sequence_layout = {"family": "linguaforge", "version": 1}
    tasks = ("tts", "lm")
    model_keys = None  # its `model:` shape is checked by `models.registry.model_shape`
    lora_targets = ("attn.qkv", "attn.proj", "mlp.fc", "mlp.proj")

    def load_codec(self, run: FamilyRun) -> Any:
        """Return the run's codec (tts), None for lm. Raises InputError when a tts run names none."""
        if run.task != "tts":
            return None
        if run.codec_path is None:
            raise InputError(f"{run.source}: task tts needs `codec:` (a file from `codec train`).")
        from core.speech.codec import load_codec

        return load_codec(run.codec_path)

    def speech_rate(self, run: FamilyRun) -> float | None:
        """Return the codec's frames (codes) per second for tts (the own model has no fixed rate), None for lm."""
        return run.codec.frame_rate if run.task == "tts" and run.codec is not None else None

    def model_config(self, run: FamilyRun) -> Any:
        """Return the LMConfig/TTSConfig: shape from the base checkpoint's model_config or the run's
        `model:` entry, rows from the tokenizer, codec sizes from the codec."""
        from core.families.contract import special_ids
        from models.registry import model_config, model_shape, shape_of

        try:
            saved = run.base_meta.get("model_config")
            shape = shape_of(saved) if saved else model_shape(run.model)
        except ValueError as exc:
            raise InputError(f"{run.source}: {exc}.") from exc
        start, stop = special_ids(run.tokenizer)
        sizes: dict[str, Any] = {"text_rows": run.tokenizer.size}
        if run.task == "tts":
            sizes.update(codebook_size=run.codec.codebook_size, n_mels=run.codec.n_mels, start_text=start, stop_text=stop)
        else:
            sizes.update(bos_id=start, eos_id=stop)
        return model_config(run.task, {k: v for k, v in shape.items() if k not in sizes}, **sizes)

    def build_model(self, model_config: Any, frozen_rows: int) -> nn.Module:
        """Return a GPTTTS or GPTLM (by the config's type; a dict with a codebook is a tts config) with
        `frozen_rows` frozen text rows."""
        from models.registry import build_model
        from models.tts import TTSConfig

        tts = "codebook_size" in model_config if isinstance(model_config, Mapping) else isinstance(model_config, TTSConfig)
        return build_model("tts" if tts else "lm", dict(model_config) if isinstance(model_config, Mapping) else model_config,
                           frozen_rows)

    def memory_shape(self, model_config: Mapping[str, Any]) -> MemoryShape:
        """Return the own GPT's shape for the memory plan (`models.gpt`: MLP 4 × width; tts: the latents, text and
        speech each wrapped in start/stop, a speech head over the codes and their start/stop; lm: the text only)."""
        width = int(model_config["d_model"])
        tts = "codebook_size" in model_config
        return MemoryShape(block="linguaforge", layers=int(model_config["n_layers"]), width=width, heads=int(model_config["n_heads"]),
                           mlp_width=4 * width, text_rows=int(model_config["text_rows"]),
                           speech_rows=int(model_config["codebook_size"]) + 2 if tts else 0,
                           conditioning=int(model_config.get("n_latents", 4)) if tts else 0, speech_extra=2 if tts else 0,
                           output_dropout=float(model_config.get("dropout", 0.0)),
                           naive_attention=model_config.get("attention") == "naive")

    def enable_activation_checkpointing(self, model: nn.Module) -> bool:
        """Checkpoint every block of the own GPT backbone (`models.gpt.GPT.activation_checkpointing`)."""
        model.gpt.activation_checkpointing = True
        return True

    def text_row_modules(self, model: nn.Module) -> list[Any]:
        """Return [text_embedding, text_head]."""
        return [model.text_embedding, model.text_head]

    def prepare_features(self, run: FamilyRun) -> Path | None:
        """Return the tts preprocessing cache (built now when needed); None for lm."""
        if run.task != "tts":
            return None
        from core.families.linguaforge.data import prepare_cache

        return prepare_cache(run)

    def task_data(self, run: FamilyRun, model_config: Any, cache_dir: Path | None) -> Any:
        """Return the lm or tts TaskData of `core.families.linguaforge.tasks`."""
        from core.families.linguaforge.tasks import build_task_data

        return build_task_data(run, model_config, cache_dir)

"""LinguaForge's own GPT models (`task: lm | tts`) behind the family interface: today's code paths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from core.errors import InputError
from core.families import get_family
from core.families.base import FamilyRun, ModelFamily


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
        """Return a GPTTTS or GPTLM (by the config's type) with `frozen_rows` frozen text rows."""
        from models.registry import build_model
        from models.tts import TTSConfig

        return build_model("tts" if isinstance(model_config, TTSConfig) else "lm", model_config, frozen_rows)

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

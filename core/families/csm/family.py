"""Sesame CSM (transformers' `CsmForConditionalGeneration`, `MimiModel`, `CsmProcessor`) as a LinguaForge model family.

The model folder is the `sesame/csm-1b` layout: `config.json` (backbone, depth decoder and the Mimi codec's
config), `model.safetensors` (the three models' tensors), the Llama-3 tokenizer (`tokenizer.json`,
`tokenizer_config.json`) and the processor's files. The model is built from that config.json at any size
with `embed_text_tokens` grown to the run's tokenizer (`csm.model`); the new language's tokenizer is the
folder's extended with `tokenizer merge` (byte-level BPE: new merges after the base's, new ids after the 256
reserved specials) and the checkpoint's rows with `embeddings extend --family csm` (fvt / mean). One sequence
layout serves training and decoding (`csm.layout`: the segments `CsmProcessor` builds, the speaker's prompt
clip as the context segment); the losses are the published forward's, the backbone's (first codebook) and
the depth decoder's (the other codebooks) reported apart; the features are the folder's own Mimi codes in the
one feature cache (`csm.features`). CSM has no text head, so `embed_text_tokens` is its only text tensor.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import nn

from core.errors import InputError
from core.families import get_family
from core.families.base import TEMPERATURE, FamilyRun, MemoryShape, ModelFamily, checkpoint_hf_blocks, paired_splits
from core.families.csm.layout import LAYOUT, collate, csm_forward, lay_out_sample, layout_ids
from core.families.csm.model import CONFIG_NAME, CsmModelConfig, build_csm, module_state_dict, read_folder_config
from core.numbers import NumberRange

FILES = {"config": CONFIG_NAME, "model": "model.safetensors", "tokenizer_json": "tokenizer.json"}
FRAMES_PER_SECOND = 12.5  # Mimi at 24 kHz: one frame per 1,920 samples


class CsmFamily(ModelFamily):
    """Sesame CSM through the family interface."""

    name = "csm"
    layout = get_family("csm")
    sequence_layout = LAYOUT
    tasks = ("tts",)
    start_role = "model"
    tokenizer_role = "tokenizer"  # the model folder itself: AutoTokenizer's Llama-3 files
    marker_releases = {FILES["model"]: "csm"}
    marker_names = tuple(marker_releases)
    speech_options = {"temperature": TEMPERATURE, "top_k": NumberRange(0, 100_000, integer=True)}  # backbone and depth decoder
    model_keys = ("preset", "dropout")
    # the cache holds the Mimi codes: the codec never runs in the training forward
    unused_in_training = ("codec_model",)
    speech_tokens_per_second = FRAMES_PER_SECOND
    published_is_base = True
    lora_targets = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
                    "mlp.up_proj", "mlp.down_proj")

    # -- files ------------------------------------------------------------------------------
    def published_names(self, model_dir: Path) -> dict[str, str]:
        """Return {role: name} of a CSM folder: config.json, model.safetensors and the tokenizer's tokenizer.json."""
        return dict(FILES)

    def published_files(self, model_dir: Path) -> dict[str, Path]:
        """Return {role: path} of the CSM folder `model_dir`, `tokenizer` being the folder itself (what
        `AutoTokenizer.from_pretrained` reads). Raises InputError naming the first missing file."""
        for role, name in FILES.items():
            if not (model_dir / name).is_file():
                raise InputError(f"{model_dir / name}: missing from the CSM folder {model_dir} (the {role}). It must hold "
                                 f"{', '.join(FILES.values())} as sesame/csm-1b ships them; nothing is downloaded.")
        return {**{role: model_dir / name for role, name in FILES.items()}, "tokenizer": model_dir}

    def check_release(self, files: Mapping[str, Path]) -> str:
        """Return one line of what the folder holds: the CSM config's backbone, codebooks and text rows against
        the tokenizer's ids. Raises InputError for a config that is not CSM's or rows that differ from the ids."""
        from core.tokenizers.tokenizer import load_tokenizer

        config = read_folder_config(files["config"].parent)
        ids, rows = load_tokenizer(files["tokenizer"]).size, int(config.get("text_vocab_size", 128256))
        if rows != ids:
            raise InputError(f"{files['config']}: text_vocab_size {rows}, but {files['tokenizer_json']} has {ids} ids: "
                             "the two come from different folders; pull the release whole: `python -m core models pull csm`.")
        return (f"CSM backbone {config.get('num_hidden_layers')} × {config.get('hidden_size')}, "
                f"{config.get('num_codebooks')} Mimi codebooks, {rows} text rows = the tokenizer's ids")

    # -- model ------------------------------------------------------------------------------
    def model_config(self, run: FamilyRun) -> CsmModelConfig:
        """Return the folder's config.json at the tokenizer's size.

        Raises InputError without a model folder or base checkpoint, for `model:` keys other than preset and
        dropout, and for a tokenizer whose CSM special tokens sit elsewhere than the config says.
        """
        self.check_model_keys(run.model, run.source)
        if run.model_dir is None:
            raise InputError(f"{run.source}: family csm needs model_dir (or settings families.csm.model_dir): the CSM "
                             "folder whose config.json sizes the model and whose Mimi makes the features.")
        if run.base is None:
            raise InputError(f"{run.source}: family csm starts from a CSM checkpoint: set model_dir (its model.safetensors) "
                             "or base_checkpoint (from `embeddings extend --family csm`).")
        config = read_folder_config(run.model_dir)
        layout_ids(run.tokenizer, config)
        return CsmModelConfig(run.tokenizer.size, config, self.training_dropout(run.model, run.source))

    def build_model(self, model_config: Any, frozen_rows: int) -> nn.Module:
        """Return the CSM at the tokenizer's size with `frozen_rows` frozen text rows."""
        if isinstance(model_config, Mapping):
            model_config = CsmModelConfig.from_dict(model_config)
        return build_csm(model_config, frozen_rows)

    def text_row_modules(self, model: nn.Module) -> list[Any]:
        """Return [embed_text_tokens] (CSM has no text head)."""
        return [model.embed_text_tokens]

    def load_weights(self, model: nn.Module, state_dict: Mapping[str, torch.Tensor], source: str, tokenizer: Any) -> None:
        """Load `state_dict` strictly into `model`: a published `model.safetensors` is converted to the modules'
        names first (`csm.model.module_state_dict`). Raises InputError as the base class does."""
        rows = state_dict.get(self.layout.embedding_key)
        if rows is not None and int(rows.shape[0]) == tokenizer.size:
            state_dict = module_state_dict(model.config, state_dict, source)
        super().load_weights(model, state_dict, source, tokenizer)

    def text_row_prefixes(self, model: nn.Module) -> tuple[str, ...]:
        """Return ("embed_text_tokens.",)."""
        return ("embed_text_tokens.",)

    def memory_shape(self, model_config: Mapping[str, Any]) -> MemoryShape:
        """Return the Llama backbone's shape for the memory plan: text in begin/end-of-text, frames with the
        audio-eos position, the context segment as conditioning, the first codebook's head as the speech head."""
        config = CsmModelConfig.from_dict(model_config)
        data = config.config
        width = int(data.get("hidden_size", 2048))
        return MemoryShape(block="llama", layers=int(data.get("num_hidden_layers", 16)), width=width,
                           heads=int(data.get("num_attention_heads", 32)), mlp_width=int(data.get("intermediate_size", 8192)),
                           text_rows=0, speech_rows=int(data.get("vocab_size", 2051)),
                           conditioning=config.positions // 2, text_extra=2, speech_extra=1,
                           attention_dropout=config.dropout or 0.0)

    def enable_activation_checkpointing(self, model: nn.Module) -> bool:
        """Checkpoint every layer of the backbone."""
        return checkpoint_hf_blocks(model.backbone_model)

    # -- data -------------------------------------------------------------------------------
    def features_source(self, run: FamilyRun, device: torch.device) -> Any:
        """Return the run's feature-cache source (`csm.features.CsmFeatures`: the folder's Mimi)."""
        from core.families.csm.features import CsmFeatures

        if run.model_dir is None:
            raise InputError(f"{run.source}: family csm needs model_dir: the CSM folder whose Mimi makes the features.")
        return CsmFeatures(run.tokenizer, read_folder_config(run.model_dir), self.published_files(run.model_dir)["model"],
                           device)

    def feature_fingerprint(self, run: FamilyRun) -> str | None:
        """Return the fingerprint of the folder's Mimi (None without a model folder)."""
        if run.model_dir is None:
            return None
        if "feature_fingerprint" not in run.extra:
            run.extra["feature_fingerprint"] = self.features_source(run, torch.device("cpu")).features
        return run.extra["feature_fingerprint"]

    def prepare_features(self, run: FamilyRun) -> Path:
        """Return the feature cache of the run's manifest (Mimi codes, built now when needed) with pairs.json.

        Raises InputError without a manifest or model folder.
        """
        from core.data.feature_cache import build_feature_cache, feature_batch_size
        from core.data.pairs import PAIRS_NAME, build_pairs

        if run.manifest is None:
            raise InputError(f"{run.source}: family csm needs data.manifest (from `dataset import`).")
        device = torch.device(run.feature_device or ("cuda" if torch.cuda.is_available() else "cpu"))
        source = self.features_source(run, device)
        run.feature_build = build_feature_cache(source, run.manifest, run.tokenizer, run.cache_root, run.val_ratio,
                                                feature_batch_size(run.options, device, self.name),
                                                split_by=run.split_by, shard=run.feature_shard)
        if run.feature_build.complete and not (run.feature_build.path / PAIRS_NAME).is_file():
            report = build_pairs(run.feature_build.path, run.prompts_per_target, run.seed)
            run.extra["single_clip_speakers"] = report.single_clip_speakers
        return run.feature_build.path

    def task_data(self, run: FamilyRun, model_config: Any, cache_dir: Path | None) -> Any:
        """Return TaskData of (target clip, prompt clip) pairs from the feature cache, each laid out as the
        prompt's context segment and the target's segment (`csm.layout.lay_out_sample`).

        Raises InputError when the cache was built for another tokenizer or codec, or no training clip fits
        the backbone's positions.
        """
        from core.data.feature_cache import load_item, open_cache
        from core.data.pairs import load_pairs
        from core.data.splits import TRAIN, VAL
        from core.families.contract import TaskData

        if isinstance(model_config, Mapping):
            model_config = CsmModelConfig.from_dict(model_config)
        index = open_cache(cache_dir)
        if index.tokenizer_fingerprint != run.tokenizer.fingerprint or index.codec_fingerprint != self.feature_fingerprint(run):
            raise InputError(f"{cache_dir}: built with another tokenizer or codec than the run's; run `train` again to rebuild it.")
        ids = layout_ids(run.tokenizer, model_config.config)
        pairs = load_pairs(cache_dir)
        entries = {e["id"]: e for e in index.items}

        @lru_cache(maxsize=4096)
        def segment(clip_id: str) -> tuple[torch.Tensor, torch.Tensor]:
            raw = load_item(index.path, entries[clip_id])
            frames = torch.cat([torch.from_numpy(raw["codes"].astype("int64"))[:, None],
                                torch.from_numpy(raw["depth_codes"].astype("int64"))], dim=1)
            return torch.from_numpy(raw["text_ids"].astype("int64")), frames

        def sample(pair: tuple[str, str]) -> dict[str, torch.Tensor]:
            return lay_out_sample(ids, [segment(pair[1]), segment(pair[0])])

        splits = paired_splits(run, index.items, pairs, (model_config.max_text_tokens, model_config.max_speech_tokens),
                               sample, lambda pair: sum(entries[c]["n_text"] + entries[c]["n_codes"] + 3 for c in pair))
        if not splits[TRAIN]:
            raise InputError(f"{cache_dir}: no training clip fits CSM's positions (text ≤ {model_config.max_text_tokens} "
                             f"ids, ≤ {model_config.max_speech_tokens} frames per segment).")
        return TaskData(splits[TRAIN], splits[VAL], collate, csm_forward, {"backbone_loss": 1.0, "depth_loss": 1.0})

    # -- speech -----------------------------------------------------------------------------
    def load_speaker(self, checkpoint: Any, tokenizer: Path | None, model_dir: Path | None, settings: Any,
                     device: str = "auto") -> Any:
        """Return a CsmSpeaker: the checkpoint's CSM with the model folder's Mimi (24 kHz)."""
        from core.families.csm.speech import CsmSpeaker

        return CsmSpeaker(self, checkpoint, tokenizer, model_dir, settings, device)

    # -- export -----------------------------------------------------------------------------
    def export(self, checkpoint: Path, output_dir: Path, name: str | None, settings: Any) -> list[Path]:
        """Write a folder `CsmForConditionalGeneration.from_pretrained` and `AutoProcessor.from_pretrained` load
        strictly: config.json at the grown `text_vocab_size`, generation_config.json and model.safetensors
        (`save_pretrained`: the published key layout), the grown tokenizer.json, the model folder's processor files
        (settings `families.csm.model_dir`: tokenizer_config.json, processor_config.json, chat_template.jinja, …)
        and `linguaforge.json` (the metadata, the layout and the published call that decodes in it); return the paths.

        Raises InputError when the checkpoint is not a LinguaForge csm checkpoint, its tokenizer is not found, or
        the model folder is not set (its processor files are what AutoProcessor reads).
        """
        from transformers import CsmForConditionalGeneration

        from core.checkpoint import load_checkpoint
        from core.families.csm.decode import PUBLISHED_INFERENCE
        from core.fsutil import atomic_write_json, atomic_write_text
        from core.inference import resolve_tokenizer
        from core.tokenizers.hf_folder import folder_tokenizer_json

        loaded = load_checkpoint(checkpoint)
        meta = loaded.meta or {}
        if meta.get("family") != self.name:
            raise InputError(f"{checkpoint}: family {meta.get('family')!r}, not csm; export the checkpoint of a csm run.")
        model_dir = (settings.get("families.csm") or {}).get("model_dir")
        if not model_dir:
            raise InputError("settings families.csm.model_dir: not set; name the CSM folder the run trained from (its "
                             "processor files go into the export).")
        model_dir = Path(model_dir).expanduser()
        tokenizer = resolve_tokenizer(loaded, settings)
        config = CsmModelConfig(tokenizer.size, read_folder_config(model_dir))
        model = CsmForConditionalGeneration(config.csm_config())
        try:
            model.load_state_dict(loaded.state_dict, strict=True)
        except RuntimeError as exc:
            raise InputError(f"{checkpoint}: its tensors do not fit {model_dir / CONFIG_NAME} at {tokenizer.size} text "
                             f"rows ({str(exc).splitlines()[0]}).") from exc
        output_dir.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(output_dir)
        skip = {CONFIG_NAME, FILES["model"], FILES["tokenizer_json"], "generation_config.json", "linguaforge.json"}
        carried = []
        for path in sorted(model_dir.iterdir()):
            if path.is_file() and path.suffix in (".json", ".jinja") and path.name not in skip:
                carried.append(atomic_write_text(output_dir / path.name, path.read_text(encoding="utf-8")))
        text = folder_tokenizer_json(tokenizer.path) if tokenizer.path.is_dir() else tokenizer.path.read_text(encoding="utf-8")
        tokenizer_path = atomic_write_text(output_dir / FILES["tokenizer_json"], text)
        note = {**meta, "text_vocab_size": tokenizer.size, "layout": LAYOUT, "published_inference": PUBLISHED_INFERENCE,
                "load_with": "CsmForConditionalGeneration.from_pretrained(folder) and AutoProcessor.from_pretrained(folder)"}
        note_path = atomic_write_json(output_dir / "linguaforge.json", note)
        written = [output_dir / CONFIG_NAME, output_dir / "generation_config.json", output_dir / FILES["model"]]
        return [*written, tokenizer_path, *carried, note_path]

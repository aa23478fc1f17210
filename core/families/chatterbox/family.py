"""Chatterbox T3 (chatterbox-light 1.0.2 = Resemble AI's code) as a LinguaForge model family.

The model is the published `T3` (`LinguaForgeT3` only adds a training forward; its state-dict
keys are T3's) built with `T3Config(text_tokens_dict_size=V)`, V = the tokenizer's size. The
Llama backbone's shape is read from the checkpoint (layers from the `tfmr.layers.N.` keys,
widths from the tensors), registered in `LLAMA_CONFIGS` under a derived name when it differs
from `Llama_520M`, so a reduced test model and the published one go through the same code.
`text_emb` / `text_head` become `SplitEmbedding` / `SplitHead` (frozen base rows as buffers).

Training loss: shifted labels on the text and the speech segments of each sample laid out by
`chatterbox.layout` (`[cond | text | speech]`, right-padded and masked; the conditioning and
prompt positions are never scored), weighted by `loss.text_weight` / `loss.mel_weight`;
`mel_loss` / `mel_top1` are the speech-token loss and accuracy.

`is_multilingual` (`T3Config`: true only at 2454 rows) flips off for a grown vocabulary; nothing
here reads it — text preparation follows the tokenizer's language tags instead — and the export
note tells the user. `SUPPORTED_LANGUAGES` of the published `generate()` refuses new tags, so
synthesis runs T3 + S3Gen itself, checking the tag against the tokenizer.
"""

from __future__ import annotations

import shutil
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import nn

from core.errors import InputError
from core.numbers import NumberRange
from core.families import get_family
from core.families.base import TEMPERATURE, FamilyRun, MemoryShape, ModelFamily, checkpoint_hf_blocks, paired_splits
from core.families.chatterbox.layout import LAYOUT, collate
from core.families.chatterbox.speech import SPEECH_TOKENS_PER_SECOND
from core.families.chatterbox.t3 import (
    CONDITIONING_POSITIONS,
    HEAD_DIM,
    ENGLISH_FILES,
    MULTILINGUAL_FILES,
    MULTILINGUAL_ROWS,
    MULTILINGUAL_T3,
    OPTIONAL_FILES,
    ChatterboxConfig,
    backbone_shape,
    build_t3,
    t3_forward,
)

#: the call of the published `T3.inference` that decodes in the trained layout (export notes, docs/guides/chatterbox.md)
PUBLISHED_INFERENCE = (
    "T3.inference(t3_cond=cond, text_tokens=torch.stack([text, text]), initial_speech_tokens=torch.zeros(2, 0, "
    "dtype=torch.long), max_new_tokens=N, temperature=T, cfg_weight=W): `text` wrapped 255…0; the empty "
    "initial_speech_tokens gives one start-of-speech token, as in training (the default one makes two and shifts "
    "every generated token by one position). It always samples: temperature=1e-6, repetition_penalty=1.0, "
    "min_p=0.0, top_p=1.0, cfg_weight=0.0 decode by argmax. The last token returned is the stop token 6562."
)


class ChatterboxFamily(ModelFamily):
    """Chatterbox T3 through the family interface."""

    name = "chatterbox"
    start_role = "t3"  # the published T3 (`t3_mtl23ls_v3.safetensors`, `…_v2` or `t3_cfg.safetensors`)
    layout = get_family("chatterbox")
    sequence_layout = LAYOUT
    tasks = ("tts",)
    model_keys = ("preset", "text_tokens_dict_size", "dropout")
    speech_options = {
        "temperature": TEMPERATURE, "cfg_weight": NumberRange(0.0, 10.0), "repetition_penalty": NumberRange(0.0, 10.0, low_open=True),
        "min_p": NumberRange(0.0, 1.0), "top_p": NumberRange(0.0, 1.0, low_open=True), "exaggeration": NumberRange(0.0, 2.0),
        "cfm_steps": NumberRange(1, 100, integer=True),
    }
    # T3 hands its Llama backbone `inputs_embeds`: the backbone's own token table is never used
    unused_in_training = ("tfmr.embed_tokens",)
    speech_tokens_per_second = SPEECH_TOKENS_PER_SECOND
    lora_targets = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")

    tokenizer_role = "tokenizer"  # `grapheme_mtl_merged_expanded_v1.json` or `tokenizer.json`
    marker_releases = {MULTILINGUAL_T3["v3"]: "chatterbox:v3", MULTILINGUAL_T3["v2"]: "chatterbox",
                       ENGLISH_FILES["t3"]: "chatterbox:english"}
    marker_names = tuple(marker_releases)  # newest first
    #: the T3 backbone's layer-key prefix and its name (`check_release`)
    t3_backbone = ("tfmr.layers.", "Llama")
    #: the model config and the builder of the trainable T3
    config_class: type = ChatterboxConfig
    build_t3 = staticmethod(build_t3)

    # -- files ------------------------------------------------------------------------------
    def published_names(self, model_dir: Path) -> dict[str, str]:
        """Return {role: name} of the newest multilingual release the folder holds a T3 of (v3 before v2), else,
        when it holds only the English T3, the English release (the multilingual v2 names for an empty folder)."""
        t3 = next((name for name in MULTILINGUAL_T3.values() if (model_dir / name).is_file()), None)
        if t3 is not None:
            return {**MULTILINGUAL_FILES, "t3": t3}
        return ENGLISH_FILES if (model_dir / ENGLISH_FILES["t3"]).is_file() else MULTILINGUAL_FILES

    def published_files(self, model_dir: Path) -> dict[str, Path]:
        """Return {role: path} of the release `published_names` picks (v3, else v2, else the English release).

        Raises InputError naming the first missing file, every name expected and the pull command.
        """
        from core.families.releases import pull_command

        files = {role: model_dir / name for role, name in self.published_names(model_dir).items()}
        for role, path in files.items():
            if not path.is_file():
                raise InputError(
                    f"{path}: missing from the Chatterbox folder {model_dir} (the {role}). It must hold the multilingual "
                    f"release's {', '.join(MULTILINGUAL_FILES.values())} (or {MULTILINGUAL_T3['v3']} for v3; or the "
                    f"English release's {', '.join(ENGLISH_FILES.values())}): `{pull_command(self.release_of(model_dir) or 'chatterbox:v3')}`."
                )
        files.update({role: model_dir / n for role, n in OPTIONAL_FILES.items() if (model_dir / n).is_file()})
        return files

    def check_release(self, files: Mapping[str, Path]) -> str:
        """Return what the T3 holds (its backbone, layers and width, text rows equal to the tokenizer's ids),
        read from the safetensors header and the tokenizer.

        Raises InputError naming the T3 when its backbone is not this family's (`t3_backbone`: a Llama T3 is the
        multilingual release's, a GPT-2 one Turbo's or Nano's), when `check_t3_width` refuses its width, or when
        its text rows differ from the folder's tokenizer, with the pull command of the release.
        """
        from core.checkpoint import tensor_shapes
        from core.families.releases import pull_command
        from core.tokenizers.tokenizer import load_tokenizer

        t3, tokenizer = files["t3"], files["tokenizer"]
        pull = pull_command(self.release_of(t3.parent) or "chatterbox:v3")
        shapes = tensor_shapes(t3)
        prefix, backbone = self.t3_backbone
        layers = {key.split(".")[2] for key in shapes if key.startswith(prefix)}
        if not layers or "text_emb.weight" not in shapes:
            raise InputError(f"{t3}: not a {backbone} T3 (no {prefix}* / text_emb.weight), so not family {self.name}'s (a "
                             "Llama T3 is the multilingual release's, a GPT-2 one Turbo's or Nano's); replace it: "
                             f"`{pull}`.")
        rows, width = shapes["text_emb.weight"]
        self.check_t3_width(t3, width, pull)
        size = load_tokenizer(tokenizer).size
        if rows != size:
            raise InputError(f"{t3}: {rows} text rows, but the folder's tokenizer {tokenizer.name} has {size} ids: the two "
                             f"come from different releases; pull the release whole: `{pull}`.")
        return f"T3 {t3.name}: {backbone}, {len(layers)} layers × {width}, {rows} text rows = the tokenizer's {size} ids"

    def check_t3_width(self, t3: Path, width: int, pull: str) -> None:
        """Return None when a T3 of this width may carry its file name (any width: reduced test models too)."""

    def base_size(self, base: Any) -> int | None:
        """Return the base checkpoint's recorded base size, else its row count (a published T3 is all base)."""
        if base is None:
            return None
        recorded = (base.meta or {}).get("base_size")
        return int(recorded) if recorded is not None else int(base.state_dict[self.layout.embedding_key].shape[0])

    # -- model ------------------------------------------------------------------------------
    def model_config(self, run: FamilyRun) -> Any:
        """Return the family's config (`config_class`): V from the tokenizer, backbone from the base checkpoint
        (`read_backbone`).

        Raises InputError without a base checkpoint, for `model:` keys other than `model_keys`, and when
        `text_tokens_dict_size` disagrees with the tokenizer.
        """
        self.check_model_keys(run.model, run.source)
        declared = run.model.get("text_tokens_dict_size")
        if declared is not None and declared != run.tokenizer.size:
            raise InputError(
                f"{run.source}: model.text_tokens_dict_size {declared} disagrees with the tokenizer "
                f"{run.tokenizer.path} ({run.tokenizer.size} ids). T3 is sized from the tokenizer; remove the number or set it to {run.tokenizer.size}."
            )
        if run.base is None:
            raise InputError(f"{run.source}: family {self.name} starts from a T3 checkpoint: set model_dir (its "
                             f"{self.marker_names[0]}) or base_checkpoint (from `embeddings extend --family {self.name}`).")
        shape = self.read_backbone(run.base.state_dict, str(run.base.path))
        return self.config_class(text_tokens_dict_size=run.tokenizer.size, **shape,
                                 dropout=self.training_dropout(run.model, run.source))

    @staticmethod
    def read_backbone(state_dict: Mapping[str, torch.Tensor], source: str) -> dict[str, int]:
        """Return the backbone shape of a T3 state dict (`chatterbox.t3.backbone_shape`)."""
        return backbone_shape(state_dict, source)

    def build_model(self, model_config: Any, frozen_rows: int) -> nn.Module:
        """Return the T3 at the tokenizer's size with `frozen_rows` frozen text rows."""
        if isinstance(model_config, Mapping):
            model_config = self.config_class.from_dict(model_config)
        return self.build_t3(model_config, frozen_rows)

    def text_row_modules(self, model: nn.Module) -> list[Any]:
        """Return [text_emb, text_head]."""
        return [model.text_emb, model.text_head]

    def features_source(self, run: FamilyRun, device: torch.device) -> Any:
        """Return the feature-cache source of the run (`chatterbox.features.ChatterboxFeatures`; Turbo's subclasses it)."""
        from core.families.chatterbox.features import ChatterboxFeatures

        return ChatterboxFeatures(run.tokenizer, self.published_files(run.model_dir), device)

    def training_functions(self, run: FamilyRun) -> tuple[Any, Any, dict[str, float]]:
        """Return (collate, forward, loss weights) of the family's one sequence layout: the loss is the run's
        weights over the forward's text and speech losses."""
        return collate, t3_forward, {"text_loss": run.text_weight, "mel_loss": run.mel_weight}
    def memory_shape(self, model_config: Mapping[str, Any]) -> MemoryShape:
        """Return T3's shape for the memory plan: the Llama backbone, 34 conditioning positions, the perceiver's
        prompt, text wrapped in start/stop, speech in start/stop, the published speech head's rows."""
        from chatterbox.models.t3.modules.t3_config import T3Config

        config = ChatterboxConfig.from_dict(model_config)
        return MemoryShape(block="llama", layers=config.n_layers, width=config.hidden_size, heads=config.hidden_size // HEAD_DIM,
                           mlp_width=config.intermediate_size, text_rows=config.text_tokens_dict_size,
                           speech_rows=T3Config(text_tokens_dict_size=config.text_tokens_dict_size).speech_tokens_dict_size,
                           conditioning=CONDITIONING_POSITIONS, prompt_tokens=config.speech_cond_prompt_len,
                           attention_dropout=config.dropout or 0.0)

    def enable_activation_checkpointing(self, model: nn.Module) -> bool:
        """Checkpoint every layer of T3's backbone (`tfmr`: Llama, GPT-2 for Turbo)."""
        return checkpoint_hf_blocks(model.tfmr)

    def feature_fingerprint(self, run: FamilyRun) -> str | None:
        """Return the fingerprint of the voice encoder and S3 tokenizer files (None without a model folder)."""
        from core.families.chatterbox.features import feature_fingerprint

        if run.model_dir is None:
            return None
        if "feature_fingerprint" not in run.extra:
            source = self.features_source(run, torch.device("cpu"))
            run.extra["feature_fingerprint"] = feature_fingerprint(source.files, source.feature_format)
        return run.extra["feature_fingerprint"]

    # -- data -------------------------------------------------------------------------------
    def prepare_features(self, run: FamilyRun) -> Path:
        """Return the feature cache of the run's manifest (built now when needed) with pairs.json.

        Raises InputError without a manifest or model folder.
        """
        from core.data.pairs import PAIRS_NAME, build_pairs
        from core.data.feature_cache import build_feature_cache, feature_batch_size

        if run.manifest is None:
            raise InputError(f"{run.source}: family {self.name} needs data.manifest (from `dataset import`).")
        if run.model_dir is None:
            raise InputError(f"{run.source}: family {self.name} needs model_dir (or settings families.{self.name}.model_dir): "
                             "the folder with the voice encoder and S3Gen, whose models make the features.")
        device = torch.device(run.feature_device or ("cuda" if torch.cuda.is_available() else "cpu"))
        batch_size = feature_batch_size(run.options, device, self.name)
        source = self.features_source(run, device)
        run.feature_build = build_feature_cache(source, run.manifest, run.tokenizer, run.cache_root, run.val_ratio,
                                                batch_size, split_by=run.split_by, shard=run.feature_shard)
        cache_dir = run.feature_build.path
        if run.feature_build.complete and not (cache_dir / PAIRS_NAME).is_file():
            report = build_pairs(cache_dir, run.prompts_per_target, run.seed)
            run.extra["single_clip_speakers"] = report.single_clip_speakers
        return cache_dir

    def task_data(self, run: FamilyRun, model_config: Any, cache_dir: Path | None) -> Any:
        """Return TaskData of (target clip, prompt clip) pairs from the feature cache.

        Raises InputError when the cache was built for another tokenizer or feature models,
        or no training clip fits T3's position limits.
        """
        from core.data.feature_cache import load_item, open_cache
        from core.data.pairs import load_pairs
        from core.data.splits import TRAIN, VAL
        from core.families.contract import TaskData

        index = open_cache(cache_dir)
        if index.tokenizer_fingerprint != run.tokenizer.fingerprint or index.codec_fingerprint != self.feature_fingerprint(run):
            raise InputError(f"{cache_dir}: built with another tokenizer or feature models than the run's; run `train` again to rebuild it.")
        pairs = load_pairs(cache_dir)
        entries = {e["id"]: e for e in index.items}

        @lru_cache(maxsize=4096)
        def item(clip_id: str) -> dict[str, torch.Tensor]:
            raw = load_item(index.path, entries[clip_id])
            return {k: torch.from_numpy(v.astype("float32" if k == "speaker_emb" else "int64")) for k, v in raw.items()}

        def sample(pair: tuple[str, str]) -> dict[str, torch.Tensor]:
            target, prompt = item(pair[0]), item(pair[1])
            return {"text_ids": target["text_ids"], "codes": target["codes"], "prompt": prompt["prompt"],
                    "speaker_emb": prompt["speaker_emb"]}

        splits = paired_splits(run, index.items, pairs, (model_config.max_text_tokens, model_config.max_speech_tokens),
                               sample, lambda pair: entries[pair[0]]["n_text"] + entries[pair[0]]["n_codes"] + 4)
        if not splits[TRAIN]:
            raise InputError(f"{cache_dir}: no training clip fits T3's limits (text ≤ {model_config.max_text_tokens}, "
                             f"speech ≤ {model_config.max_speech_tokens} tokens).")
        return TaskData(splits[TRAIN], splits[VAL], *self.training_functions(run))

    # -- export and speech ------------------------------------------------------------------
    def export(self, checkpoint: Path, output_dir: Path, name: str | None, settings: Any) -> list[Path]:
        """Write `t3_<name>.safetensors` (T3's keys, loads strictly into `T3(T3Config(text_tokens_dict_size=V))`),
        the tokenizer JSON `<name>.json`, `linguaforge.json` and what the published `ChatterboxMultilingualTTS`
        needs (`chatterbox.published`: `speak_chatterbox.py`, the folder's ve.pt, s3gen.pt, conds.pt) into
        `output_dir`; return the paths.

        Raises InputError when the checkpoint is not a LinguaForge chatterbox checkpoint or its tokenizer is not found.
        """
        from core.checkpoint import load_checkpoint, save_checkpoint
        from core.families.chatterbox.published import SHIM_NAME, carry_published_files, t3_backbone
        from core.families.chatterbox.text import language_tags
        from core.fsutil import atomic_write, atomic_write_json
        from core.inference import resolve_tokenizer

        loaded = load_checkpoint(checkpoint)
        meta = loaded.meta or {}
        if meta.get("family") != self.name:
            raise InputError(f"{checkpoint}: family {meta.get('family')!r}, not chatterbox; export the checkpoint of a chatterbox run.")
        tokenizer = resolve_tokenizer(loaded, settings)
        name = name or tokenizer.path.stem
        output_dir.mkdir(parents=True, exist_ok=True)
        rows = int(loaded.state_dict[self.layout.embedding_key].shape[0])
        t3_path = save_checkpoint(output_dir / f"t3_{name}.safetensors", loaded.state_dict, meta)
        tokenizer_path = output_dir / f"{name}.json"
        with atomic_write(tokenizer_path) as tmp:
            shutil.copyfile(tokenizer.path, tmp)
        note = {
            **meta,
            "t3_file": t3_path.name,
            "tokenizer_file": tokenizer_path.name,
            "text_tokens_dict_size": rows,
            "is_multilingual": rows == MULTILINGUAL_ROWS,
            "language_tags": sorted(language_tags(tokenizer)),
            "load_with": (f"T3(T3Config(text_tokens_dict_size={rows})) then load_state_dict(safetensors.torch.load_file"
                          f"('{t3_path.name}')); ChatterboxMultilingualTTS.from_local hard-codes T3Config.multilingual() "
                          f"(2454 rows) and generate() refuses language ids outside SUPPORTED_LANGUAGES, so build T3 yourself "
                          f"or use `python -m core synthesize --family chatterbox`."),
            "layout": LAYOUT,
            "published_inference": PUBLISHED_INFERENCE,
        }
        model_dir = (settings.get("families.chatterbox") or {}).get("model_dir")
        carried, missing = carry_published_files(Path(model_dir).expanduser() if model_dir else None, output_dir)
        backbone = t3_backbone(ChatterboxConfig(text_tokens_dict_size=rows, **backbone_shape(loaded.state_dict, str(checkpoint))))
        note.update({
            **({"t3_backbone": backbone} if backbone else {}),
            "speak_with": (f"python {SHIM_NAME} --text … --language {{tag}} --output out.wav [--reference voice.wav]  (in this "
                           "folder): builds the grown T3, accepts the new tags, then the published generate()"),
            "missing_for_published_inference": missing,
        })
        note_path = atomic_write_json(output_dir / "linguaforge.json", note)
        return [t3_path, tokenizer_path, note_path, *carried]

    def speech_files(self, model_dir: Path, settings: Any) -> dict[str, Path]:
        """Return the published files synthesis reads (S3Gen and the VoiceEncoder beside T3; conds.pt when present).

        Raises InputError naming the first missing file.
        """
        return self.published_files(model_dir)

    def load_speaker(self, checkpoint: Any, tokenizer: Path | None, model_dir: Path | None, settings: Any,
                     device: str = "auto") -> Any:
        """Return a ChatterboxSpeaker: T3 + S3Gen (24 kHz) from the model folder."""
        from core.families.chatterbox.speech import ChatterboxSpeaker

        return ChatterboxSpeaker(self, checkpoint, tokenizer, model_dir, settings, device)

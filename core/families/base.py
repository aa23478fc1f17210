"""The one model-family interface the trainer, the doctor, the jobs and the dashboard talk to.

A `ModelFamily` provides (README, "Bringing an IndexTTS2 or Chatterbox checkpoint" and "Vocabulary
contract"): its text-row `layout`, the published files it expects in a model folder, strict
loading of its published checkpoint, the model config sized from the tokenizer (backbone shape
read from the checkpoint's tensors), the model with its text rows split frozen/trainable, the
freezing rules and base-rows checksum, feature extraction into a fingerprinted cache, the
training data and loss (`core.families.contract.TaskData`), native export, and speech:
`load_speaker` returns a `Speaker` (the checkpoint and the family's speech models loaded once)
whose `speak` turns one text into a waveform; `synthesize` (the CLI and the Inference tab) and
periodic evaluation both speak through it, and `speech_files` names what a model folder must hold for it.

The hooks take plain values: `FamilyRun` carries what a family reads of one training run (the
trainer's plan, `core.training.plan`, fills it in from the run config and settings); families
import nothing of `core.training`. Families register in `core.families.registry`;
`get_model_family(name)` returns one.

The memory plan (`core.training.memory`) counts a family's parameters by building its model on the
`meta` device with the run's freeze or LoRA applied; what a training step holds beyond them comes
from one small hook, `memory_shape` (a `MemoryShape`: the backbone's block kind and size, the positions
a sample takes around its text and speech, the rows of the two heads).
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from core.errors import InputError
from core.families import Family, rows_for

if TYPE_CHECKING:  # torch is imported where a model is built, so the CLI's parser stays light
    import torch
    from torch import nn

    from core.checkpoint import LoadedCheckpoint
    from core.config import Settings
    from core.families.contract import TaskData
    from core.tokenizers.tokenizer import Tokenizer
    from models.rows import _SplitRows


@dataclass
class FamilyRun:
    """What a family sees of a training run, as plain values: where they came from (`source`, for
    messages), the task, tokenizer, base checkpoint and model folder, the run's `model:` entry, its
    data files (paths resolved), cache root, split and pairing settings, seed, loss weights and the
    family's settings section (`options`, `families.<name>` of the settings).

    `codec` is the family's speech-code model where it has one (`linguaforge` tts: the run's
    codec); `extra` holds what a family remembers between its hooks (its feature fingerprint, …).
    """

    source: str
    task: str
    tokenizer: "Tokenizer"
    base: "LoadedCheckpoint | None"
    model_dir: Path | None
    model: dict[str, Any]
    manifest: Path | None
    corpus: list[Path]
    codec_path: Path | None
    cache_root: Path
    val_ratio: float
    prompts_per_target: int
    seed: int
    text_weight: float
    mel_weight: float
    options: dict[str, Any]
    codec: Any = None
    extra: dict[str, Any] = field(default_factory=dict)
    split_by: str = "clip"  # `speaker`: whole speakers in the val split (the cache engine's `split_by`)

    @property
    def base_meta(self) -> dict[str, Any]:
        """Return the base checkpoint's LinguaForge metadata ({} without one)."""
        return dict(self.base.meta or {}) if self.base is not None else {}


@dataclass(frozen=True)
class MemoryShape:
    """What one training step of a family holds beyond its parameters, for the memory plan.

    `block` names the backbone's transformer block (`llama`, `gpt2` or `linguaforge`: what autograd
    keeps per position of it is the plan's, `core.training.memory.BLOCKS`) with `layers`, `width`,
    `heads` and `mlp_width`; `attention_dropout` > 0 keeps attention scores where the attention
    kernel cannot drop out itself (the CPU), `naive_attention` keeps them always. A sample is
    `conditioning` positions, its text ids + `text_extra`, its speech tokens + `speech_extra`; the text
    head has `text_rows` rows and scores every text position, the speech head `speech_rows` and every
    speech position. `prompt_tokens`: prompt tokens each sample encodes inside the step (Chatterbox's
    perceiver over its 150-token prompt). `recomputes`: the model checkpoints its blocks by itself
    (IndexTTS2's `gpt.checkpointing`, on by default).
    """

    block: str
    layers: int
    width: int
    heads: int
    mlp_width: int
    text_rows: int
    speech_rows: int
    conditioning: int
    text_extra: int = 2
    speech_extra: int = 2
    prompt_tokens: int = 0
    attention_dropout: float = 0.0
    naive_attention: bool = False
    recomputes: bool = False


def checkpoint_hf_blocks(backbone: nn.Module) -> bool:
    """Turn on Hugging Face activation checkpointing (non-reentrant) in a transformers backbone; return True."""
    enable = getattr(backbone, "activation_checkpointing_enable", None)
    if enable is not None:  # transformers ≥ 5.20 (`gradient_checkpointing_enable` is its deprecated alias)
        enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        backbone.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return True


@dataclass
class SynthesisRequest:
    """One synthesis call: what to say, with which checkpoint and voice, and where to write it."""

    checkpoint: Path
    text: str
    output: Path
    tokenizer: Path | None = None
    reference: Path | None = None
    language: str | None = None
    model_dir: Path | None = None
    seed: int = 0
    max_new_tokens: int | None = None
    options: dict[str, Any] = field(default_factory=dict)
    device: str = "auto"


class Speaker(ABC):
    """One checkpoint with its family's speech models, loaded once; `speak` says one text at a time.

    `sample_rate` is the rate of the waveforms `speak` returns; `tokens_per_second` the rate of
    the speech tokens the model generates (it bounds `max_new_tokens` by a duration).
    """

    sample_rate: int
    tokens_per_second: float

    @abstractmethod
    def speak(
        self, text: str, reference: Path | None = None, language: str | None = None, seed: int = 0,
        max_new_tokens: int | None = None, options: Mapping[str, Any] | None = None,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Return (waveform [samples], float32 on the CPU at `sample_rate`; report with at least `seconds`
        and `sample_rate`) for `text` in `reference`'s voice.

        Raises InputError for a text, language or reference the model cannot speak.
        """


class ModelFamily(ABC):
    """Base class of a model family; subclasses must implement the abstract methods and override what differs. Every method raises
    InputError (one line naming the file/value and the fix) on bad input."""

    name: str = ""
    layout: Family
    #: the sequence layout training and every decoder share ({family, version}; recorded in checkpoint metadata)
    sequence_layout: dict[str, Any] | None = None
    #: the `task` values this family trains
    tasks: tuple[str, ...] = ("tts",)
    #: the numeric options its speaker takes (`synthesize --option`, `eval.synthesis`)
    speech_options: tuple[str, ...] = ()
    #: the role in `published_files` of the checkpoint a run starts from when it names none
    start_role: str | None = None
    #: the role in `published_files` of the base tokenizer its published checkpoint was trained with
    tokenizer_role: str | None = None
    #: file names that mark a folder as one of this family's published model folders (its checkpoints)
    marker_names: tuple[str, ...] = ()
    #: the modules a LoRA adapter adapts when a run names no `adapter.targets` (name suffixes, peft's rule)
    lora_targets: tuple[str, ...] = ()
    #: the keys a run config's `model:` entry may hold for this family (None: any, its model config checks them)
    model_keys: tuple[str, ...] | None = ("preset",)
    #: speech tokens per second of audio (the memory plan sizes a clip's speech from its duration; None: from the position limits)
    speech_tokens_per_second: float | None = None

    def check_model_keys(self, model: Mapping[str, Any], source: str) -> None:
        """Return None when every key of a run config's `model:` entry applies to this family (`model_keys`).

        Cheap (nothing loads): the run's plan calls it, so the doctor, the dashboard's preflight and the
        trainer refuse the same entry. Raises InputError naming `<source>.model.<key>`, the keys the
        family takes and the fix.
        """
        if self.model_keys is None:
            return
        unknown = sorted(key for key in model if key not in self.model_keys)
        if unknown:
            takes = " and ".join(f"model.{key}" for key in self.model_keys)
            raise InputError(
                f"{source}.model.{unknown[0]}: does not apply to family {self.name}, which takes only {takes} (its shape "
                f"comes from its checkpoint, its vocabulary from the tokenizer). Remove {', '.join(unknown)} from the "
                "config's model: section."
            )

    def check_speech_options(self, options: Mapping[str, float]) -> dict[str, float]:
        """Return `options` (`--option KEY=NUMBER` pairs) when its speaker takes each (temperature has its own flag).

        Raises InputError naming the first option it does not take and the ones it does.
        """
        known = [k for k in self.speech_options if k != "temperature"]
        unknown = sorted(k for k in options if k not in known)
        if unknown:
            raise InputError(f"--option {unknown[0]}: not an option of a {self.name} speaker; it takes "
                             f"{', '.join(known) or 'none'} (and --temperature).")
        return dict(options)

    # -- files and detection -----------------------------------------------------------------
    def published_names(self, model_dir: Path) -> dict[str, str]:
        """Return {role: file name} of the published files `published_files` expects in `model_dir`."""
        return {}

    def missing_published(self, model_dir: Path) -> list[str]:
        """Return the names of `published_names(model_dir)` that are not files in `model_dir`, in role order."""
        return [name for name in self.published_names(model_dir).values() if not (Path(model_dir) / name).is_file()]

    def published_files(self, model_dir: Path) -> dict[str, Path]:
        """Return {role: path} of the published files in `model_dir` (role e.g. `t3`, `voice_encoder`).

        Raises InputError naming the first missing file and the names expected.
        """
        return {}

    def default_checkpoint(self, model_dir: Path | None) -> Path | None:
        """Return the published checkpoint in `model_dir` a run starts from when it names none (its
        `start_role` file; None without a folder or a start role). Raises InputError like `published_files`."""
        if model_dir is None or self.start_role is None:
            return None
        return self.published_files(model_dir)[self.start_role]

    def load_state_dict(self, path: Path) -> "LoadedCheckpoint":
        """Return the checkpoint at `path` loaded safely (weights_only / safetensors), unwrapped."""
        from core.checkpoint import load_checkpoint

        return load_checkpoint(path)

    def base_size(self, base: "LoadedCheckpoint | None") -> int | None:
        """Return the number of base-language rows of `base`: its metadata's `base_size`, else None."""
        return (base.meta or {}).get("base_size") if base is not None else None

    # -- the model --------------------------------------------------------------------------
    def load_codec(self, run: FamilyRun) -> Any:
        """Return the run's speech-code model, or None when the family brings its own feature models."""
        return None

    def feature_fingerprint(self, run: FamilyRun) -> str | None:
        """Return the fingerprint of the models the features came from (the codec's for LinguaForge),
        recorded in checkpoints as `codec_fingerprint`; None when there are none."""
        return getattr(run.codec, "fingerprint", None)

    @abstractmethod
    def model_config(self, run: FamilyRun) -> Any:
        """Return the model config (an object with `to_dict()`, `max_text_tokens`, `max_speech_tokens`)
        sized from `run.tokenizer`, the backbone shape read from the base checkpoint's tensors.

        Raises InputError when a declared size disagrees with the tokenizer or the shape cannot be read.
        """

    @abstractmethod
    def build_model(self, model_config: Any, frozen_rows: int) -> nn.Module:
        """Return a freshly initialised model (of the model config or its `to_dict()`) whose first
        `frozen_rows` text rows (and the layout's extra rows) are frozen buffers, the rest trainable."""

    def memory_shape(self, model_config: Mapping[str, Any]) -> MemoryShape | None:
        """Return what a training step of the model of `model_config` (its `to_dict()`) holds beyond its
        parameters, for the memory plan; None when the family states none (the doctor then skips the plan)."""
        return None

    def enable_activation_checkpointing(self, model: nn.Module) -> bool:
        """Make `model` keep only each block's input while training and recompute the block in the backward
        pass (the run's `activation_checkpointing: true`); return False when its backbone cannot."""
        return False

    @abstractmethod
    def text_row_modules(self, model: nn.Module) -> list["_SplitRows"]:
        """Return the model's split text-row modules (embedding first, then head)."""

    def text_row_prefixes(self, model: nn.Module) -> tuple[str, ...]:
        """Return the parameter-name prefixes of the text rows (`text_emb.`, `text_head.`, …)."""
        return tuple(f"{key.rsplit('.', 1)[0]}." for key in (self.layout.embedding_key, self.layout.head_weight_key))

    def apply_freeze(self, model: nn.Module, mode: str) -> None:
        """Set `requires_grad` for `mode`: `all-but-new-rows` trains only the trainable text rows;
        `base-rows` and `none` train every parameter (frozen rows are buffers, never parameters)."""
        prefixes = self.text_row_prefixes(model)
        for name, param in model.named_parameters():
            param.requires_grad = mode != "all-but-new-rows" or name.startswith(prefixes)

    def base_rows_sha256(self, model: nn.Module) -> str | None:
        """Return one sha256 over the frozen text rows of every split module, or None when none are frozen."""
        modules = self.text_row_modules(model)
        if not any(m.frozen or m.frozen_tail for m in modules):
            return None
        digest = hashlib.sha256()
        for module in modules:
            digest.update(module.base_sha256().encode())
        return digest.hexdigest()

    def load_weights(self, model: nn.Module, state_dict: Mapping[str, torch.Tensor], source: str, tokenizer: "Tokenizer") -> None:
        """Load `state_dict` strictly into `model`.

        Raises InputError when its text rows do not fit `tokenizer` (with the `embeddings extend`
        fix) or any tensor is missing, unexpected or mis-shaped.
        """
        key = self.layout.embedding_key
        if key not in state_dict and f"{key}_new" in state_dict:
            from core.checkpoint import adapter_checkpoint_error

            raise adapter_checkpoint_error(source)
        rows = int(state_dict[key].shape[0]) if key in state_dict else None
        need = rows_for(self.layout, tokenizer.size)
        if rows != need:
            raise InputError(
                f"{source}: {rows} text rows ({key}) but the tokenizer {tokenizer.path} with {tokenizer.size} ids "
                f"needs {need}. Resize the checkpoint first with `embeddings extend --family {self.name}`."
            )
        try:
            model.load_state_dict(dict(state_dict))
        except RuntimeError as exc:
            raise InputError(f"{source}: its weights do not fit this model ({str(exc).splitlines()[0]}).") from exc

    # -- data -------------------------------------------------------------------------------
    def prepare_features(self, run: FamilyRun) -> Path | None:
        """Return the fingerprinted feature cache folder for the run (built or completed now), or None
        when the task reads no cache. Raises InputError when the data or feature models are unusable."""
        return None

    @abstractmethod
    def task_data(self, run: FamilyRun, model_config: Any, cache_dir: Path | None) -> "TaskData":
        """Return the trainer's TaskData: train/val SampleSets, collate, and `forward(module, batch)`
        returning `loss`, the metrics and `tokens`."""

    # -- export and speech ------------------------------------------------------------------
    def export(self, checkpoint: Path, output_dir: Path, name: str | None, settings: "Settings") -> list[Path]:
        """Write the family's native files for `checkpoint` into `output_dir` plus `linguaforge.json`;
        return the written paths."""
        raise InputError(f"family {self.name}: export is not available; use `prune` for LinguaForge checkpoints.")

    def speech_files(self, model_dir: Path, settings: "Settings") -> dict[str, Path]:
        """Return {role: path} of the files in (or named for) `model_dir` that synthesis reads.

        Raises InputError naming the first missing file and where the family expects it.
        """
        return {}

    def load_speaker(
        self, checkpoint: "Path | LoadedCheckpoint", tokenizer: Path | None, model_dir: Path | None,
        settings: "Settings", device: str = "auto",
    ) -> Speaker:
        """Return a Speaker for `checkpoint` (a path or an already loaded checkpoint) with the speech
        models of `model_dir`, on `device` (`auto` = CUDA when present).

        Raises InputError for a missing or mis-shaped file, or a tokenizer that does not fit.
        """
        raise InputError(f"family {self.name}: synthesis is not available through the family interface.")

    def synthesize(self, request: SynthesisRequest, settings: "Settings") -> dict[str, Any]:
        """Speak `request.text` into `request.output` (wav) through `load_speaker`; return the speaker's
        report with `output` first. Raises InputError as `load_speaker` and `Speaker.speak` do."""
        from core.audio import write_wav

        speaker = self.load_speaker(request.checkpoint, request.tokenizer, request.model_dir, settings, request.device)
        wav, report = speaker.speak(request.text, request.reference, request.language, request.seed,
                                    request.max_new_tokens, request.options)
        output = write_wav(request.output, wav, speaker.sample_rate)
        return {"output": str(output), **report}

"""The one model-family interface the trainer, the doctor, the jobs and the dashboard talk to.

A `ModelFamily` provides (docs/concepts/vocabulary.md): its text-row `layout`, the published files it expects in a model folder, strict
loading of its published checkpoint, the model config sized from the tokenizer (backbone shape
read from the checkpoint's tensors), the model with its text rows split frozen/trainable, the
freezing rules and base-rows checksum, feature extraction into a fingerprinted cache, the
training data and loss (`core.families.contract.TaskData`), native export, and speech:
`load_speaker` returns a `Speaker` (the checkpoint and the family's speech models loaded once)
whose `speak` turns one text into a waveform and `speak_stream` yields the same text's audio in chunks
while its tokens are generated (a family gives its `Utterance`: the token generator and the "vocode
these tokens" step, `core.speech.stream`); `synthesize` (the CLI and the Inference tab) and periodic
evaluation both speak through it, and `speech_files` names what a model folder must hold for it.

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
import time
from collections import OrderedDict
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

from core.errors import InputError
from core.families import Family, rows_for
from core.numbers import MAX_TEMPERATURE, NumberRange

if TYPE_CHECKING:  # torch is imported where a model is built, so the CLI's parser stays light
    import torch
    from torch import nn

    from core.checkpoint import LoadedCheckpoint
    from core.config import Settings
    from core.data.feature_cache import CacheInfo
    from core.data.shards import Shard
    from core.families.contract import TaskData
    from core.speech.stream import ChunkPlan, ExactStream, WindowVocoder
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
    `feature_shard` and `feature_device` ask `prepare_features` for one shard of the feature cache
    (`core.data.shards`) on one device (None: all clips; the family's default device), and it leaves
    the engine's report in `feature_build` (pairs are built once the cache is complete).
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
    feature_shard: "Shard | None" = None
    feature_device: str | None = None
    feature_build: "CacheInfo | None" = None

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
    kernel cannot drop out itself (the CPU), `naive_attention` keeps them always; `output_dropout` > 0
    keeps a dropout mask per position of each block's attention and MLP outputs (LinguaForge's own GPT). A sample is
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
    output_dropout: float = 0.0
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
    """One synthesis call: what to say, with which checkpoint and voice, and where to write it; `stream`
    writes the wav as it is vocoded (`core.audio_formats.GrowingWav`), `speed` resamples the speech (0.25–4)."""

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
    stream: bool = False
    speed: float = 1.0


class VoiceCache:
    """What a speaker made of its last `size` reference clips (its voice conditioning), by the clip's real path,
    size and modification time, so a server's repeated voice is prepared once and a clip replaced on disk again."""

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self._voices: OrderedDict[tuple[Any, ...], Any] = OrderedDict()

    def get(self, clip: Path, make: Callable[[], Any], *extra: Any) -> Any:
        """Return the voice of `clip` (with `extra` in the key), made by `make` when it is not kept."""
        stat = Path(clip).stat()
        key = (str(Path(clip).resolve()), stat.st_size, stat.st_mtime_ns, *extra)
        if key not in self._voices:
            self._voices[key] = make()
            while len(self._voices) > self.size:
                self._voices.popitem(last=False)
        self._voices.move_to_end(key)
        return self._voices[key]


class Utterance(ABC):
    """One text a Speaker has checked and set up to say: its speech tokens as the model generates them,
    the family's "vocode these tokens" step (`vocoder`, `core.speech.stream.WindowVocoder`) and its report."""

    vocoder: WindowVocoder

    @abstractmethod
    def tokens(self) -> Iterator[tuple[int, Any]]:
        """Yield each speech token the vocoder takes, as it is generated, with its extra (None when the family's
        vocoder needs none); stop early when the consumer stops. Raises InputError when nothing can be spoken."""

    @abstractmethod
    def report(self, samples: int) -> dict[str, Any]:
        """Return the family's report once the tokens are exhausted or stopped; `samples` is the audio's length."""

    def exact_stream(self) -> ExactStream | None:
        """Return a vocoder that turns each token into its own audio as it comes, exactly as the whole utterance's
        (no window, lookahead or cross-fade), for a stream to use in place of `ChunkedVocoder`; None (the
        default) when the family's vocoder needs windows."""
        return None


class SpeechStream:
    """One utterance's audio in chunks (iterate it once): tokens are vocoded in chunks as they are generated
    (`plan`, or token by token where the utterance gives an `exact_stream`; None = one whole-utterance window
    once generation ends). `stop` (checked before each token)
    ends generation early. `report`, after the last chunk: the utterance's report plus seconds,
    sample_rate, chunks, first_audio_s (from the call to the first chunk), synthesis_s, rtf and stopped_early."""

    def __init__(self, utterance: Utterance, plan: ChunkPlan | None, tokens_per_second: float, sample_rate: int,
                 stop: Callable[[], bool] | None = None, started: float | None = None) -> None:
        from core.speech.stream import ChunkedVocoder

        self.utterance, self.sample_rate, self.stop = utterance, sample_rate, stop
        exact = utterance.exact_stream() if plan is not None else None
        self.chunker = exact if exact is not None else ChunkedVocoder(utterance.vocoder, plan, tokens_per_second)
        self.started = time.perf_counter() if started is None else started
        self.report: dict[str, Any] | None = None

    def __iter__(self) -> Iterator[torch.Tensor]:
        first: float | None = None
        samples = 0
        stopped = False
        tokens = self.utterance.tokens()
        try:
            for token, extra in tokens:
                if self.stop is not None and self.stop():
                    stopped = True
                    break
                for chunk in self.chunker.add(token, extra):
                    first = first if first is not None else time.perf_counter() - self.started
                    samples += chunk.numel()
                    yield chunk
        finally:
            tokens.close()
        for chunk in ([] if stopped else self.chunker.finish()):
            first = first if first is not None else time.perf_counter() - self.started
            samples += chunk.numel()
            yield chunk
        elapsed = time.perf_counter() - self.started
        seconds = samples / self.sample_rate
        self.report = {**self.utterance.report(samples), "seconds": round(seconds, 3), "sample_rate": self.sample_rate,
                       "chunks": self.chunker.chunks, "first_audio_s": None if first is None else round(first, 3),
                       "synthesis_s": round(elapsed, 3), "rtf": round(elapsed / seconds, 4) if seconds else None,
                       "stopped_early": stopped}


def set_dropout(model: "nn.Module", p: float) -> int:
    """Set every dropout of `model`'s training forward to `p` and return how many were set: each `nn.Dropout`
    and the float rates attention modules hand their fused kernels (`attention_dropout` of transformers'
    Llama, `dropout_rate` of T3's perceiver, `dropout` of LinguaForge's attention)."""
    from torch import nn

    count = 0
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = p
            count += 1
        for name in ("attention_dropout", "dropout_rate", "dropout"):
            if isinstance(getattr(module, name, None), float):
                setattr(module, name, p)
                count += 1
    return count


def paired_splits(run: FamilyRun, items: list[dict[str, Any]], pairs: Mapping[str, list[str]], limits: tuple[int, int],
                  sample: Callable[[tuple[str, str]], Any], length: Callable[[tuple[str, str]], int]) -> dict[str, Any]:
    """Return the train and val `SampleSet`s of a feature cache's (target clip, prompt clip) pairs
    (`core.data.pairs.training_pairs` within `limits`, the most text and speech tokens a clip may hold): each pair
    loaded by `sample` and `length` long, with the pairs left out (`filtered`), the run's single-clip speakers and
    each target's language."""
    from core.data.pairs import training_pairs
    from core.data.splits import TRAIN, VAL
    from core.families.contract import SampleSet

    language = {e["id"]: e.get("language") for e in items}
    splits: dict[str, Any] = {}
    for split in (TRAIN, VAL):
        chosen, filtered = training_pairs(items, pairs, split, *limits, run.prompts_per_target)
        splits[split] = SampleSet([length(pair) for pair in chosen], lambda i, chosen=chosen: sample(chosen[i]),
                                  filtered=filtered, extra={"single_clip_speakers": run.extra.get("single_clip_speakers", {}),
                                                            "languages": [language[t] for t, _ in chosen]})
    return splits


class Speaker(ABC):
    """One checkpoint with its family's speech models, loaded once; it says one text at a time, whole
    (`speak`) or in chunks as the tokens are generated (`speak_stream`).

    `sample_rate` is the rate of the waveforms it returns; `tokens_per_second` the rate of the speech
    tokens the model generates (it bounds `max_new_tokens` by a duration); `stream_plan` how its
    streams are cut by default (None: `core.speech.stream.ChunkPlan()`).
    """

    sample_rate: int
    tokens_per_second: float
    stream_plan: ChunkPlan | None = None

    @abstractmethod
    def utterance(
        self, text: str, reference: Path | None = None, language: str | None = None, seed: int = 0,
        max_new_tokens: int | None = None, options: Mapping[str, Any] | None = None, speed: float = 1.0,
    ) -> Utterance:
        """Return `text` set up to be said in `reference`'s voice at `speed` (1 = as generated), before
        any token is generated. Raises InputError for a text, language or reference the model cannot speak."""

    def speak_stream(
        self, text: str, reference: Path | None = None, language: str | None = None, seed: int = 0,
        max_new_tokens: int | None = None, options: Mapping[str, Any] | None = None, speed: float = 1.0,
        plan: ChunkPlan | None = None, stop: Callable[[], bool] | None = None,
    ) -> SpeechStream:
        """Return the SpeechStream of `text` cut by `plan` (default `stream_plan`); the text, language and
        voice are checked now (InputError), the tokens are generated as the stream is read."""
        from core.speech.stream import ChunkPlan

        started = time.perf_counter()
        utterance = self.utterance(text, reference, language, seed, max_new_tokens, options, speed)
        return SpeechStream(utterance, plan or self.stream_plan or ChunkPlan(), self.tokens_per_second, self.sample_rate,
                            stop, started)

    def speak(
        self, text: str, reference: Path | None = None, language: str | None = None, seed: int = 0,
        max_new_tokens: int | None = None, options: Mapping[str, Any] | None = None, speed: float = 1.0,
        plan: ChunkPlan | None = None,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Return (waveform [samples], float32 on the CPU at `sample_rate`; report with at least `seconds`
        and `sample_rate`) for `text` in `reference`'s voice: the concatenation of the chunks its stream
        with `plan` gives (None: one window over the whole utterance once every token is generated).

        Raises InputError for a text, language or reference the model cannot speak.
        """
        import torch

        utterance = self.utterance(text, reference, language, seed, max_new_tokens, options, speed)
        stream = SpeechStream(utterance, plan, self.tokens_per_second, self.sample_rate)
        chunks = list(stream)
        return (torch.cat(chunks) if chunks else torch.zeros(0)), dict(stream.report or {})


#: the sampling temperature every family's speaker takes (0 = greedy)
TEMPERATURE = NumberRange(0.0, MAX_TEMPERATURE)


class ModelFamily(ABC):
    """Base class of a model family; subclasses must implement the abstract methods and override what differs. Every method raises
    InputError (one line naming the file/value and the fix) on bad input."""

    name: str = ""
    layout: Family
    #: the sequence layout training and every decoder share ({family, version}; recorded in checkpoint metadata)
    sequence_layout: dict[str, Any] | None = None
    #: the `task` values this family trains
    tasks: tuple[str, ...] = ("tts",)
    #: the numeric options its speaker takes (`synthesize --option`, `eval.synthesis`), each with its range
    speech_options: Mapping[str, NumberRange] = {}
    #: the role in `published_files` of the checkpoint a run starts from when it names none
    start_role: str | None = None
    #: the role in `published_files` of the base tokenizer its published checkpoint was trained with
    tokenizer_role: str | None = None
    #: file names that mark a folder as one of this family's published model folders (its checkpoints)
    marker_names: tuple[str, ...] = ()
    #: each marker file's release, its `models pull` name (`core.families.releases`), newest first
    marker_releases: Mapping[str, str] = {}
    #: the modules a LoRA adapter adapts when a run names no `adapter.targets` (name suffixes, peft's rule)
    lora_targets: tuple[str, ...] = ()
    #: the keys a run config's `model:` entry may hold for this family (None: any, its model config checks them)
    model_keys: tuple[str, ...] | None = ("preset",)
    #: modules the training forward never runs (their outputs come from the feature cache, or the published
    #: model never calls them): frozen in every mode and never adapted, so every trainable parameter gets a
    #: gradient at every step, as DDP's reduction needs
    unused_in_training: tuple[str, ...] = ()
    #: speech tokens per second of audio (the memory plan sizes a clip's speech from its duration; None: from the position limits)
    speech_tokens_per_second: float | None = None
    #: a checkpoint without a recorded `base_size` (the published one) counts all its text rows as base rows
    published_is_base: bool = False

    def speech_rate(self, run: FamilyRun) -> float | None:
        """Return the speech tokens per second of the run's audio (`speech_tokens_per_second`; None when unknown)."""
        return self.speech_tokens_per_second

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
            names = [f"model.{key}" for key in self.model_keys]
            takes = " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
            raise InputError(
                f"{source}.model.{unknown[0]}: does not apply to family {self.name}, which takes only {takes} (its shape "
                f"comes from its checkpoint, its vocabulary from the tokenizer). Remove {', '.join(unknown)} from the "
                "config's model: section."
            )

    def training_dropout(self, model: Mapping[str, Any], source: str) -> float | None:
        """Return a run config's `model.dropout` (None when unset: the published model keeps its own rates).

        Raises InputError naming `<source>.model.dropout` when it is not a number in [0, 1).
        """
        value = model.get("dropout")
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
            raise InputError(f"{source}.model.dropout: {value!r} must be a number in [0, 1) (0 trains without dropout; "
                             "leave it out for the published model's own rates).")
        return float(value)

    def check_speech_options(self, options: Mapping[str, Any], where: str = "--option",
                             temperature: bool = False) -> dict[str, float]:
        """Return `options` (`--option KEY=NUMBER` pairs) as numbers when its speaker takes each and each lies in
        its range (`speech_options`: finite, bounded, whole where it must be). `temperature` is among them only
        with `temperature` (a run config's `eval.synthesis`; on the command line it has its own flag).

        Raises InputError naming `where`, the first option it does not take or the value out of range, and the fix.
        """
        known = [k for k in self.speech_options if temperature or k != "temperature"]
        unknown = sorted(str(k) for k in options if k not in known)
        if unknown:
            raise InputError(f"{where} {unknown[0]}: not an option of a {self.name} speaker; it takes "
                             f"{', '.join(known) or 'none'} (and --temperature).")
        return {key: self.speech_options[key].check(value, f"{where} {key}") for key, value in options.items()}

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

    def release_of(self, model_dir: Path) -> str | None:
        """Return the `models pull` name of the published release `model_dir` holds: the one its first
        `marker_releases` file marks (they are listed newest first), None when it holds none."""
        marker = next((name for name in self.marker_releases if (Path(model_dir) / name).is_file()), None)
        return self.marker_releases[marker] if marker else None

    def check_release(self, files: Mapping[str, Path]) -> str:
        """Return one line saying what the release's files (`published_files`) hold, read from their content
        (the checkpoint's layout and rows against the tokenizer's size).

        Raises InputError naming the file whose content is not what the family reads and the fix.
        """
        return ""

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
        """Return the number of base-language rows of `base`: its metadata's `base_size`, else (with
        `published_is_base`: a published checkpoint is all base) its text rows, else None."""
        if base is None:
            return None
        recorded = (base.meta or {}).get("base_size")
        if recorded is None and self.published_is_base:
            return int(base.state_dict[self.layout.embedding_key].shape[0])
        return recorded

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
        `base-rows` and `none` train every parameter (frozen rows are buffers, never parameters)
        but those of `unused_in_training`."""
        prefixes, unused = self.text_row_prefixes(model), self.unused_prefixes()
        for name, param in model.named_parameters():
            param.requires_grad = (mode != "all-but-new-rows" or name.startswith(prefixes)) and not name.startswith(unused)

    def unused_prefixes(self) -> tuple[str, ...]:
        """Return the parameter-name prefixes of `unused_in_training` (`conditioning_encoder.`, …)."""
        return tuple(f"{module}." for module in self.unused_in_training)

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
        """Speak `request.text` into `request.output` (wav) through `load_speaker` — whole, or with `request.stream`
        chunk by chunk into `<output>.part` while its tokens are generated — and return the speaker's report with
        `output` first. Raises InputError as `load_speaker` and `Speaker.speak` do."""
        from core.audio import write_wav
        from core.audio_formats import GrowingWav

        speaker = self.load_speaker(request.checkpoint, request.tokenizer, request.model_dir, settings, request.device)
        asked = (request.text, request.reference, request.language, request.seed, request.max_new_tokens, request.options)
        if not request.stream:
            wav, report = speaker.speak(*asked, speed=request.speed)
            return {"output": str(write_wav(request.output, wav, speaker.sample_rate)), **report}
        stream = speaker.speak_stream(*asked, speed=request.speed)
        growing = GrowingWav(request.output, speaker.sample_rate)
        try:
            for chunk in stream:
                growing.write(chunk)
        except BaseException:
            growing.abort()
            raise
        return {"output": str(growing.close()), **(stream.report or {})}

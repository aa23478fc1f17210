"""What `eval tts` speaks through: LinguaForge's own inference, or a model family's loaded Speaker.

`load_eval_voice(checkpoint, …)` reads the checkpoint once and returns an `EvalVoice`: the own
model (task tts) with its codec, or — for a checkpoint whose metadata names another family
(chatterbox, indextts) — that family's `Speaker` with the speech models of its model folder.
A family has no codec of LinguaForge's, so its voice has no `codec` ceiling row; `absent_rows`
says why. A family speaks at most `MAX_LENGTH_RATIO` × the sentence's reference duration + 1 s
(or `max_seconds` of the options, when shorter):
an undertrained checkpoint that never emits its stop token would otherwise generate its maximum
(40 s of T3 speech, 30 s of IndexTTS2 codes) for every sentence of every periodic evaluation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from core.config import Settings
from core.errors import InputError

MAX_LENGTH_RATIO = 2.0
OWN_TEMPERATURE = 0.8  # LinguaForge's own model samples at this temperature unless the options say otherwise


@dataclass
class EvalVoice:
    """A checkpoint ready to speak held-out sentences."""

    family: str
    sample_rate: int
    step: int
    # (text, prompt clip, reference seconds, seed, language) → (wav, {"tokens": speech tokens, "stopped": bool})
    speak: Callable[[str, Path, float, int, str], tuple[torch.Tensor, dict[str, Any]]]
    speech_tokens: Callable[[Path], list[int]]  # a clip's speech tokens, as the model is trained to produce them
    codec: Any = None
    absent_rows: dict[str, str] = field(default_factory=dict)
    embed: Callable[[Any], Any] | None = None  # the family's own speaker encoder (16 kHz numpy → vector); None: Resemblyzer
    #: the training data's speech tokens per character (low, high) its checkpoint records; None for a file without it
    length_bounds: tuple[float, float] | None = None


def family_model_dir(family: str, settings: Settings, explicit: str | Path | None = None) -> Path | None:
    """Return the model folder a family checkpoint speaks with: `explicit` (the caller's, e.g. the run's
    `model_dir:`), else settings `families.<family>.model_dir`; None when neither is set."""
    if explicit:
        return settings.resolve(explicit)
    value = settings.get(f"families.{family}.model_dir")
    return settings.resolve(value) if value else None


def _own_voice(loaded: Any, settings: Settings, device: str, tokenizer: Path | None, temperature: float) -> EvalVoice:
    from core.inference import load_for_inference, synthesize

    inference = load_for_inference(loaded, settings, str(tokenizer) if tokenizer else None, task="tts", device=device)

    def speak(text: str, prompt: Path, reference_seconds: float, seed: int, language: str) -> tuple[torch.Tensor, dict[str, Any]]:
        wav, report = synthesize(inference, text, reference=prompt, temperature=temperature, seed=seed, language=language)
        return wav, {"tokens": [t for codes in report["tokens"] for t in codes], "stopped": all(report["stopped"])}

    def speech_tokens(path: Path) -> list[int]:
        from core.audio import read_audio

        codec = inference.codec
        return codec.encode(read_audio(path, codec.sample_rate)[0]).flatten().tolist()

    return EvalVoice("linguaforge", inference.codec.sample_rate, int(inference.meta.get("step") or 0), speak,
                     speech_tokens, inference.codec)


def _family_voice(name: str, loaded: Any, settings: Settings, device: str, model_dir: Path | None,
                  options: dict[str, Any], tokenizer: Path | None) -> EvalVoice:
    from core.families.registry import get_model_family

    family = get_model_family(name)
    options = dict(options)
    max_seconds = float(options.pop("max_seconds", math.inf))
    if model_dir is None:
        raise InputError(f"{loaded.path}: a {name} checkpoint speaks with the family's model folder; pass --model-dir "
                         f"or set families.{name}.model_dir in the settings.")
    speaker = family.load_speaker(loaded, tokenizer, model_dir, settings, device)

    def speak(text: str, prompt: Path, reference_seconds: float, seed: int, language: str) -> tuple[torch.Tensor, dict[str, Any]]:
        seconds = min(MAX_LENGTH_RATIO * reference_seconds + 1, max_seconds)
        wav, report = speaker.speak(text, prompt, language, seed, math.ceil(seconds * speaker.tokens_per_second), options)
        return wav, {"tokens": list(report["tokens"]), "stopped": bool(report["stopped"])}

    absent = {"codec": f"family {name} decodes its own speech tokens with its vocoder; there is no LinguaForge codec "
                       "whose ceiling could be measured"}
    return EvalVoice(name, speaker.sample_rate, int((loaded.meta or {}).get("step") or 0), speak,
                     speaker.speech_tokens, None, absent, speaker.speaker_embedding)


def load_eval_voice(checkpoint: Path, settings: Settings, device: str = "auto", model_dir: str | Path | None = None,
                    options: dict[str, Any] | None = None, family: str | None = None,
                    tokenizer: str | Path | None = None) -> EvalVoice:
    """Return the EvalVoice of `checkpoint`: the own TTS model, or its family's Speaker (family from the
    metadata, else `family` for a file without it) speaking with `options` (speaker options plus
    `max_seconds`, a cap on each sentence). `tokenizer` is needed only for a file whose metadata
    names none (a published one); otherwise it must be the one the metadata names.

    LinguaForge's own model takes one option, `temperature` (default OWN_TEMPERATURE; 0 = greedy).

    Raises InputError for a checkpoint that is not a LinguaForge TTS checkpoint, a `family` that
    disagrees with the metadata or is missing for a file without it, a family checkpoint without a
    model folder, or a model folder missing a file synthesis reads.
    """
    from core.checkpoint import load_checkpoint
    from core.inference import checkpoint_family

    loaded = load_checkpoint(checkpoint)
    family = checkpoint_family(loaded, family)
    tokenizer_path = settings.resolve(tokenizer) if tokenizer else None
    if family == "linguaforge":
        voice = _own_voice(loaded, settings, device, tokenizer_path, float((options or {}).get("temperature", OWN_TEMPERATURE)))
    else:
        voice = _family_voice(family, loaded, settings, device, family_model_dir(family, settings, model_dir),
                              options or {}, tokenizer_path)
    voice.length_bounds = _recorded_length_bounds(loaded)
    return voice


def _recorded_length_bounds(loaded: Any) -> tuple[float, float] | None:
    """Return the (low, high) `length_bounds` a checkpoint's metadata records, None when it records none.
    Raises InputError when the record is not two increasing non-negative numbers."""
    bounds = (loaded.meta or {}).get("length_bounds")
    if bounds is None:
        return None
    if (not isinstance(bounds, (list, tuple)) or len(bounds) != 2
            or not all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in bounds)
            or not 0 <= bounds[0] <= bounds[1]):
        raise InputError(f"{loaded.path}: metadata length_bounds {bounds!r} is not two increasing numbers "
                         "(speech tokens per character); write the checkpoint again with `train` or `prune`.")
    return float(bounds[0]), float(bounds[1])

"""What a speech server speaks through: one checkpoint loaded once, speaking batches of requests.

`load_engine` reads the checkpoint once and picks by its family (metadata, else `--family`):
- LinguaForge's own TTS model (`OwnEngine`): the requests of a batch that share a voice are
  decoded together — their sentences are generated in one padded batch, as `synthesize` does for
  the sentences of one text (`core.inference.SpokenTexts`); requests in different voices are
  decoded one voice after the other.
- Chatterbox and IndexTTS2 (`FamilyEngine`): the family's `Speaker` (`load_speaker`) says one
  text at a time, so a batch is spoken request by request.
Each engine checks a request (`check`) before it is queued, so a text the model cannot speak is
refused at once, and `speak_batch` returns one waveform or one exception per request, so one bad
request never fails the others of its batch. A streamed request (`SpeechJob.sink`) gets its audio
chunk by chunk as its tokens are vocoded (`core.speech.stream`) and a `StreamEnd` as its result; its
`stop` event (its client went away) ends its generation at the next token. `counters` says what the
engine has done: requests, streams, stopped (generation ended by a departed client), speaking (in
the batch being spoken now) and speech_tokens.
"""

from __future__ import annotations

import math
import threading
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from core.config import Settings
from core.errors import InputError


@dataclass
class SpeechSettings:
    """How the server speaks every request: sampling; `max_seconds`, the longest speech of one sentence
    (own model) or one request (a family's speaker), None = the model's own limit; and `options`, a
    family speaker's options (`synthesize --option`)."""

    temperature: float = 0.8
    top_k: int | None = 50
    top_p: float | None = None
    seed: int = 0
    max_seconds: float | None = None
    options: dict[str, float] = field(default_factory=dict)

    def max_tokens(self, tokens_per_second: float) -> int | None:
        """Return `max_seconds` as a number of speech tokens at `tokens_per_second` (None without a cap)."""
        return None if self.max_seconds is None else max(1, math.ceil(self.max_seconds * tokens_per_second))


@dataclass
class SpeechJob:
    """One request to speak: its text, the voice's reference clip, language and speed; `prepared` is what
    `check` made of the text (the own model's sentences and ids). A streamed job has a `sink` that takes
    each audio chunk as it is vocoded; `stop` is set when its client has gone away."""

    text: str
    clip: Path
    language: str | None = None
    prepared: Any = field(default=None, repr=False)
    speed: float = 1.0
    sink: Callable[[torch.Tensor], None] | None = field(default=None, repr=False)
    stop: threading.Event = field(default_factory=threading.Event, repr=False)


@dataclass(frozen=True)
class StreamEnd:
    """A streamed job's result once its last chunk went to its sink: text tokens read, speech tokens
    generated, and whether its client's departure stopped it early."""

    text_tokens: int
    speech_tokens: int
    stopped: bool


@dataclass
class EngineCounters:
    """What an engine has spoken (see the module); read from any thread, written by the speaking one."""

    requests: int = 0
    streams: int = 0
    stopped: int = 0
    speaking: int = 0
    speech_tokens: int = 0


class Engine(ABC):
    """A loaded checkpoint that speaks batches of SpeechJobs on the thread that calls `speak_batch`."""

    family: str
    sample_rate: int
    #: True when one batch is decoded together (per voice); False when it is spoken request by request
    batched: bool

    def __init__(self) -> None:
        self.counters = EngineCounters()

    def counts(self) -> dict[str, int]:
        """Return the counters as a dict."""
        return asdict(self.counters)

    @abstractmethod
    def check(self, job: SpeechJob) -> None:
        """Raise InputError when the model cannot speak `job`'s text; may fill `job.prepared`."""

    def speak_batch(self, jobs: list[SpeechJob]) -> list[torch.Tensor | StreamEnd | Exception]:
        """Return, per job, its waveform (float32, CPU, at `sample_rate`), a streamed job's StreamEnd, or the
        exception that stopped it; the counters follow."""
        counters = self.counters
        counters.speaking = len(jobs)
        counters.streams += sum(1 for job in jobs if job.sink is not None)
        try:
            results = self._speak(jobs)
        finally:
            counters.speaking = 0
        counters.requests += len(jobs)
        counters.stopped += sum(1 for result in results if isinstance(result, StreamEnd) and result.stopped)
        return results

    @abstractmethod
    def _speak(self, jobs: list[SpeechJob]) -> list[torch.Tensor | StreamEnd | Exception]:
        """Speak `jobs` (see `speak_batch`), adding the speech tokens generated to the counters."""


class OwnEngine(Engine):
    """LinguaForge's own TTS model: each voice's requests of a batch decode together, streamed or whole."""

    family = "linguaforge"
    batched = True

    def __init__(self, inference: Any, settings: SpeechSettings) -> None:
        super().__init__()
        self.inference = inference
        self.settings = settings
        self.sample_rate = int(inference.codec.sample_rate)

    def check(self, job: SpeechJob) -> None:
        """Prepare `job.text` (normalised, split, encoded); raise InputError for text it cannot speak."""
        from core.inference import prepare_text

        job.prepared = prepare_text(self.inference, job.text, job.language, what="input")

    def _speak(self, jobs: list[SpeechJob]) -> list[torch.Tensor | StreamEnd | Exception]:
        """Return each job's waveform or StreamEnd, decoding the jobs of one voice clip together (`SpokenTexts`)."""
        from core.inference import SpokenTexts, reference_mel
        from core.speech.stream import ChunkPlan

        results: list[torch.Tensor | StreamEnd | Exception] = [RuntimeError("not spoken")] * len(jobs)
        by_clip: dict[Path, list[int]] = {}
        for index, job in enumerate(jobs):
            by_clip.setdefault(job.clip, []).append(index)
        s = self.settings
        max_codes = s.max_tokens(self.inference.codec.frame_rate)
        for clip, indices in by_clip.items():
            own = [jobs[i] for i in indices]
            try:
                mel = reference_mel(self.inference, clip)
                spoken = SpokenTexts(self.inference, [job.prepared for job in own], mel,
                                     [ChunkPlan() if job.sink else None for job in own], [job.speed for job in own],
                                     s.temperature, s.top_k, s.top_p, s.seed, max_codes=max_codes,
                                     stop=lambda t: own[t].stop.is_set())
                pieces: list[list[torch.Tensor]] = [[] for _ in own]
                for t, chunk in spoken:
                    if own[t].sink is not None:
                        own[t].sink(chunk)
                    else:
                        pieces[t].append(chunk)
                for t, job in enumerate(own):
                    codes = sum(len(c) for c in spoken.codes[t])
                    self.counters.speech_tokens += codes
                    results[indices[t]] = (StreamEnd(sum(len(i) for i in job.prepared.ids), codes, t in spoken.stopped)
                                           if job.sink else torch.cat(pieces[t]) if pieces[t] else torch.zeros(0))
            except Exception as exc:  # one voice's failure is its requests' answer, never the server's end
                for index in indices:
                    results[index] = exc
        return results


class FamilyEngine(Engine):
    """A Chatterbox or IndexTTS2 checkpoint through its family's Speaker, one request at a time."""

    batched = False

    def __init__(self, family: str, speaker: Any, settings: SpeechSettings) -> None:
        super().__init__()
        self.family = family
        self.speaker = speaker
        self.settings = settings
        self.sample_rate = int(speaker.sample_rate)

    def check(self, job: SpeechJob) -> None:
        """Raise InputError for a text with nothing but whitespace (the speaker checks the rest as it speaks)."""
        if not job.text.strip():
            raise InputError("input is empty; pass the text to speak.")

    def _speak(self, jobs: list[SpeechJob]) -> list[torch.Tensor | StreamEnd | Exception]:
        """Return each job's waveform (`speak`) or StreamEnd (`speak_stream` into its sink), one after the other."""
        results: list[torch.Tensor | StreamEnd | Exception] = []
        options = {**self.settings.options, "temperature": self.settings.temperature}
        max_tokens = self.settings.max_tokens(self.speaker.tokens_per_second)
        asked = (self.settings.seed, max_tokens, options)
        for job in jobs:
            try:
                if job.sink is None:
                    wav, report = self.speaker.speak(job.text, job.clip, job.language, *asked, speed=job.speed)
                    results.append(wav)
                else:
                    stream = self.speaker.speak_stream(job.text, job.clip, job.language, *asked, speed=job.speed,
                                                       stop=job.stop.is_set)
                    for chunk in stream:
                        job.sink(chunk)
                    report = dict(stream.report or {})
                    results.append(StreamEnd(int(report.get("text_tokens", 0)), int(report.get("speech_tokens", 0)),
                                             bool(report.get("stopped_early"))))
                self.counters.speech_tokens += int(report.get("speech_tokens", 0))
            except Exception as exc:  # this request's answer, never the server's end
                results.append(exc)
        return results


def load_engine(checkpoint: Path, settings: Settings, speech: SpeechSettings, model_dir: Path | None = None,
                family: str | None = None, tokenizer: Path | None = None, codec: Path | None = None,
                device: str = "auto") -> Engine:
    """Return the Engine of `checkpoint` (read once): the own TTS model with its tokenizer and codec, or
    its family's Speaker with the model folder (`model_dir`, else the settings' `families.<family>.model_dir`).

    Raises InputError as `synthesize` does: no LinguaForge metadata and no `family`, a family that
    disagrees with the metadata, an LM checkpoint, a tokenizer or codec not found, speaker options
    for the own model or options a family's speaker does not take, a family checkpoint without a
    model folder or a model folder missing a file.
    """
    from core.checkpoint import load_checkpoint
    from core.eval.voices import family_model_dir
    from core.inference import checkpoint_family, load_for_inference

    loaded = load_checkpoint(checkpoint)
    name = checkpoint_family(loaded, family)
    if name == "linguaforge":
        if speech.options:
            raise InputError(f"--option {next(iter(speech.options))}: speaker options are for Chatterbox and IndexTTS2 "
                             f"checkpoints; {checkpoint} is a LinguaForge model (use --temperature, --top-k, --top-p).")
        inference = load_for_inference(loaded, settings, str(tokenizer) if tokenizer else None,
                                       str(codec) if codec else None, task="tts", device=device)
        return OwnEngine(inference, speech)
    from core.families.registry import get_model_family

    family_class = get_model_family(name)
    family_class.check_speech_options(speech.options)
    folder = family_model_dir(name, settings, model_dir)
    if folder is None:
        raise InputError(f"{checkpoint}: a {name} checkpoint speaks with the family's model folder; pass --model-dir "
                         f"or set families.{name}.model_dir in the settings.")
    speaker = family_class.load_speaker(loaded, tokenizer, folder, settings, device)
    return FamilyEngine(name, speaker, speech)

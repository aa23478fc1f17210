"""Inference: load a checkpoint with the tokenizer and codec its metadata names, synthesize, generate.

The tokenizer and codec are resolved from the checkpoint's `linguaforge` record, in order: an
explicit path (refused when its fingerprint differs from the record), the files `prune` copies
beside the checkpoint, the paths a training checkpoint recorded, then the workspace folders
`tokenizers/` and `codecs/` searched by fingerprint. A checkpoint without the record is refused.

The model runs on `--device auto|cpu|cuda` (auto = CUDA when present). `synthesize` generates the
sentences of a text together, `SENTENCE_BATCH` at a time; sampling runs on the CPU generator, so a
seed gives the same codes on either device.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch import nn

from core.checkpoint import LoadedCheckpoint, adapter_checkpoint_error, load_checkpoint
from core.config import Settings
from core.errors import InputError
from core.text import normalize_text
from core.tokenizers.tokenizer import Tokenizer, load_tokenizer
from core.workspace_files import CODECS, TOKENIZERS, FileKind, find_files
from models.registry import build_model

SENTENCE_END = re.compile(r"(?<=[.!?።፧፨])\s+|\n+")
SILENCE_S = 0.15
# A sentence never ends before this many speech codes per text token (2 codes = 32 ms at 62.5
# codes/s): an undertrained model that predicts stop at once still yields audible output.
MIN_CODES_PER_TEXT_TOKEN = 2
REFERENCE_FRAMES = 256
SENTENCE_BATCH = 16
DEVICES = ("auto", "cpu", "cuda")


def resolve_device(name: str | None = "auto") -> torch.device:
    """Return the device for `auto` (CUDA when present, else the CPU), `cpu` or `cuda`.

    Raises InputError for `cuda` on a machine without a CUDA device, or an unknown name.
    """
    name = name or "auto"
    if name not in DEVICES:
        raise InputError(f"--device {name!r}: use one of {', '.join(DEVICES)}.")
    if name == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda: no CUDA device is available on this machine; use --device auto or cpu.")
    return torch.device("cuda" if name != "cpu" and torch.cuda.is_available() else "cpu")


MAX_TEXT_CHARS = 5000  # per synthesize call; docs/guides/own-model.md documents it


@dataclass
class InferenceModel:
    """A model ready for inference with its tokenizer, codec (tts) and checkpoint record."""

    model: nn.Module
    tokenizer: Tokenizer
    codec: Any
    meta: dict[str, Any]
    checkpoint: LoadedCheckpoint


def beside(checkpoint: Path, kind: str) -> list[Path]:
    """Return the asset files `prune` writes beside `checkpoint` (`<stem>.tokenizer.*`, `<stem>.codec.pt`)."""
    return sorted(checkpoint.parent.glob(f"{checkpoint.stem}.{kind}.*"))


def _resolve_asset(kind: str, load: Callable[[Path], Any], files: FileKind,
                   loaded: LoadedCheckpoint, settings: Settings, explicit: str | None, mismatch: str) -> Any:
    """Return the `kind` (tokenizer or codec) loaded by `load` whose fingerprint the checkpoint records.

    An explicit file must carry that fingerprint; otherwise the first of the files `prune` wrote
    beside the checkpoint, its recorded `<kind>_path` and the workspace's `files` (any depth) that
    carries it. Raises InputError naming `mismatch` (what the rows or codes would mean) when an
    explicit file has another fingerprint, when a file beside or recorded does not load (a workspace
    file that does not load is passed over), or when no file carries it.
    """
    fingerprint = (loaded.meta or {}).get(f"{kind}_fingerprint")
    if explicit:
        found = load(settings.resolve(explicit))
        if found.fingerprint != fingerprint:
            raise InputError(
                f"{settings.resolve(explicit)}: fingerprint {found.fingerprint[:12]}… but {loaded.path} was trained with "
                f"{str(fingerprint)[:12]}…; {mismatch}. Pass the checkpoint's own {kind}."
            )
        return found
    own = [*beside(loaded.path, kind)]
    if loaded.extra.get(f"{kind}_path"):
        own.append(Path(loaded.extra[f"{kind}_path"]))
    for path in own:
        if path.is_file() and (found := load(path)).fingerprint == fingerprint:
            return found
    for name in find_files(settings, files):
        try:
            found = load(settings.resolve(name))
        except InputError:
            continue
        if found.fingerprint == fingerprint:
            return found
    raise InputError(
        f"{loaded.path}: {kind} {str(fingerprint)[:12]}… not found beside it, at its recorded path or in "
        f"{settings.resolve(files.folders[0])}. Pass --{kind} with that file."
    )


def resolve_tokenizer(loaded: LoadedCheckpoint, settings: Settings, explicit: str | None = None) -> Tokenizer:
    """Return the tokenizer whose fingerprint the checkpoint records: `explicit`, else one beside the
    checkpoint, at its recorded path or under the workspace's `tokenizers/` (any depth).

    Raises InputError when an explicit tokenizer has another fingerprint, or none is found.
    """
    return _resolve_asset("tokenizer", load_tokenizer, TOKENIZERS, loaded, settings, explicit,
                          "its rows would mean other tokens")


def resolve_codec(loaded: LoadedCheckpoint, settings: Settings, explicit: str | None = None) -> Any:
    """Return the codec whose fingerprint the checkpoint records: `explicit`, else one beside the
    checkpoint, at its recorded path or under the workspace's `codecs/` (any depth).

    Raises InputError when an explicit codec has another fingerprint, or none is found.
    """
    from core.speech.codec import load_codec

    return _resolve_asset("codec", load_codec, CODECS, loaded, settings, explicit,
                          "its speech codes would mean other sounds")


def checkpoint_family(loaded: LoadedCheckpoint, explicit: str | None = None) -> str:
    """Return the model family that speaks `loaded`: the one its metadata names (`linguaforge.family`;
    `linguaforge` for an own checkpoint that predates the field), else `explicit` (`--family`).

    Raises InputError when `explicit` disagrees with the metadata, or when neither names a family
    (a published or foreign file given without `--family`).
    """
    meta = loaded.meta or {}
    recorded = meta.get("family") or ("linguaforge" if meta.get("model_config") else None)
    if recorded and explicit and explicit != recorded:
        raise InputError(
            f"--family {explicit}: {loaded.path} is a {recorded} checkpoint (its metadata says so). "
            "Leave --family out; it is needed only for files without LinguaForge metadata."
        )
    family = recorded or explicit
    if not family:
        raise InputError(
            f"{loaded.path}: no LinguaForge metadata names its model family (a published or foreign file). "
            "Pass --family chatterbox or --family indextts (with --tokenizer and --model-dir)."
        )
    return str(family)


def load_for_inference(
    checkpoint: str | Path | LoadedCheckpoint, settings: Settings, tokenizer: str | None = None, codec: str | None = None,
    task: str | None = None, device: str | None = "auto",
) -> InferenceModel:
    """Return the model of `checkpoint` (a path or an already loaded checkpoint) in eval mode on `device`
    with its tokenizer (and codec for tts).

    Raises InputError when the checkpoint has no LinguaForge metadata, is of another task than
    `task`, its tokenizer or codec cannot be resolved, or `device` is unavailable.
    """
    target = resolve_device(device)
    loaded = checkpoint if isinstance(checkpoint, LoadedCheckpoint) else load_checkpoint(settings.resolve(checkpoint))
    meta = loaded.meta or {}
    if not meta.get("model_config") or meta.get("task") not in ("tts", "lm"):
        raise InputError(f"{loaded.path}: no LinguaForge model metadata (task, model_config); train it with `train`.")
    if meta.get("adapter"):
        raise adapter_checkpoint_error(loaded.path)
    if task is not None and meta["task"] != task:
        raise InputError(f"{loaded.path}: a {meta['task']} checkpoint; this command needs a {task} checkpoint.")
    tok = resolve_tokenizer(loaded, settings, tokenizer)
    speech_codec = resolve_codec(loaded, settings, codec) if meta["task"] == "tts" else None
    config = dict(meta["model_config"], text_rows=tok.size)
    model = build_model(meta["task"], config)
    model.load_state_dict(loaded.state_dict)
    return InferenceModel(model.to(target).eval(), tok, speech_codec, meta, loaded)


def check_text_length(text: str, limit: int = MAX_TEXT_CHARS) -> None:
    """Raise InputError when `text` is longer than `limit` characters (the documented synthesis limit)."""
    if len(text) > limit:
        raise InputError(
            f"--text: {len(text)} characters; one synthesize call speaks at most {limit}. "
            "Split the text into several calls (for example by paragraph)."
        )


def is_speakable(tokenizer: Tokenizer, token_id: int) -> bool:
    """Return True when `token_id` stands for something to say: not the unk id, and a piece holding a
    letter or digit (a word-boundary mark `▁` or punctuation alone says nothing)."""
    return token_id != tokenizer.unk_id and any(c.isalnum() for c in tokenizer.piece(token_id))


def split_sentences(text: str, tokenizer: Tokenizer, max_tokens: int) -> list[str]:
    """Return `text` cut at sentence ends (. ! ? ። ፧ ፨ and line breaks), each piece ≤ `max_tokens` ids.

    A sentence still too long is cut between words. Raises InputError for empty text.
    """
    pieces: list[str] = []
    for sentence in SENTENCE_END.split(text.strip()):
        words = sentence.split()
        current: list[str] = []
        for word in words:
            if current and len(tokenizer.encode(" ".join([*current, word]))) > max_tokens:
                pieces.append(" ".join(current))
                current = []
            current.append(word)
        if current:
            pieces.append(" ".join(current))
    if not pieces:
        raise InputError("--text is empty; pass the text to speak.")
    return pieces


@dataclass
class PreparedText:
    """One text ready for the model: its sentences, their token ids and how many ids are unk."""

    sentences: list[str]
    ids: list[list[int]]
    unknown: int


def prepare_text(inference: InferenceModel, text: str, language: str | None = None, what: str = "--text") -> PreparedText:
    """Return `text` normalised, cut into sentences and encoded with the model's tokenizer.

    Raises InputError naming `what` (the option or field the text came from) for empty text, text
    over MAX_TEXT_CHARS, or text in which the tokenizer knows no letter or digit (nothing to speak).
    """
    from core.tokenizers.romanize import base_is_uppercase

    check_text_length(text)
    tok = inference.tokenizer
    normalized = normalize_text(text, language, uppercase=base_is_uppercase(tok))
    sentences = split_sentences(normalized, tok, inference.model.config.max_text_tokens)
    encoded = [tok.encode(sentence) for sentence in sentences]
    if not any(is_speakable(tok, i) for ids in encoded for i in ids):
        raise InputError(
            f"{what} {text[:40]!r}: the tokenizer knows none of its letters or digits, so there is nothing to "
            "speak. Check the text's language (--language) or use a tokenizer trained on it."
        )
    return PreparedText(sentences, encoded, sum(1 for ids in encoded for i in ids if i == tok.unk_id))


def reference_mel(inference: InferenceModel, reference: str | Path | None) -> torch.Tensor | None:
    """Return the codec mel frames [F, n_mels] of a reference clip (its first REFERENCE_FRAMES), or None.

    Raises InputError for a missing, unreadable or non-finite clip.
    """
    from core.audio import read_audio

    if reference is None:
        return None
    wav, _ = read_audio(reference, inference.codec.sample_rate)
    return inference.codec.mel(wav)[:REFERENCE_FRAMES]


class CodecVocoder:
    """The own codec as a window vocoder (`core.speech.stream`): codes → codebook log-mel frames (resampled for
    `speed`) → Griffin-Lim, frame k centred at sample k × hop. At speed 1 a whole window is `codec.decode`."""

    def __init__(self, codec: Any, speed: float = 1.0) -> None:
        self.codec, self.speed = codec, speed
        self.samples_per_token = codec.hop_length / speed

    def total_samples(self, tokens: int) -> int:
        """Return the samples Griffin-Lim makes of the whole utterance: (frames − 1) × hop."""
        from core.speech.stream import stretched_count

        return max(0, stretched_count(tokens, self.speed) - 1) * self.codec.hop_length

    def __call__(self, window: Any) -> Any:
        from core.speech.stream import WindowAudio, stretch_frames

        frames, first = stretch_frames(self.codec.codes_to_mel(torch.tensor(window.tokens)), window.start, self.speed)
        audio = self.codec.mel_to_wav(frames) if frames.shape[0] else torch.zeros(0)
        return WindowAudio(audio, first * self.codec.hop_length)


class _TextAudio:
    """One text's audio in order: the current sentence's chunks as its chunker makes them (a later sentence's
    codes wait until it is current, so the first audio waits for no other sentence's vocoding), SILENCE_S
    before each sentence with codes but the first (as the whole text has them)."""

    def __init__(self, chunkers: list[Any], gap: torch.Tensor) -> None:
        self.chunkers, self.gap = chunkers, gap
        self.waiting: list[list[int]] = [[] for _ in chunkers]
        self.ended = [False] * len(chunkers)
        self.current = 0
        self.spoken = False
        self.ready: list[torch.Tensor] = []

    def add(self, sentence: int, code: int) -> None:
        """Take the next code of `sentence`."""
        if sentence == self.current:
            self._feed(code)
        else:
            self.waiting[sentence].append(code)

    def end(self, sentence: int) -> None:
        """Mark `sentence` generated; finish every sentence from the current one on that is."""
        self.ended[sentence] = True
        while self.current < len(self.chunkers) and self.ended[self.current]:
            self.ready += [chunk for chunk in self.chunkers[self.current].finish() if chunk.numel()]
            self.current += 1
            if self.current < len(self.chunkers):
                for code in self.waiting[self.current]:
                    self._feed(code)
                self.waiting[self.current] = []

    def take(self) -> list[torch.Tensor]:
        """Return the chunks ready to be played, in order."""
        ready, self.ready = self.ready, []
        return ready

    def _feed(self, code: int) -> None:
        chunker = self.chunkers[self.current]
        if not chunker.tokens:
            if self.spoken:
                self.ready.append(self.gap)
            self.spoken = True
        self.ready += [chunk for chunk in chunker.add(code) if chunk.numel()]


class SpokenTexts:
    """Several prepared texts spoken together in one voice (`ref_mel`): iterate it for (text index, audio
    chunk at the codec's rate) in each text's order, as the chunks are vocoded.

    The sentences of every text are generated together, SENTENCE_BATCH at a time (every text's first
    sentence first, then every second one, …, so each text's first audio comes from the first batch), with
    progress (`core.progress`), each at most `max_codes` codes (None: the model's `max_speech_tokens`). Each
    text's codes are vocoded by `plans[i]` (`core.speech.stream.ChunkPlan`: in chunks while they are
    generated; None: each sentence whole once generated) at `speeds[i]`. `stop(i)`, checked after each
    step, ends text i's generation. `codes` holds each text's sentences' codes; one text with plan
    None gives what `synthesize` gives for it with the same seed.
    """

    def __init__(self, inference: InferenceModel, texts: list[PreparedText], ref_mel: torch.Tensor | None = None,
                 plans: list[Any] | None = None, speeds: list[float] | None = None, temperature: float = 0.8,
                 top_k: int | None = 50, top_p: float | None = None, seed: int = 0, use_cache: bool = True,
                 max_codes: int | None = None, stop: Callable[[int], bool] | None = None) -> None:
        self.inference, self.texts, self.ref_mel = inference, texts, ref_mel
        self.plans = plans or [None] * len(texts)
        self.speeds = speeds or [1.0] * len(texts)
        self.sampling = (temperature, top_k, top_p)
        self.seed, self.use_cache, self.max_codes, self.stop = seed, use_cache, max_codes, stop
        self.codes: list[list[list[int]]] = [[[] for _ in text.ids] for text in texts]
        self.stopped: set[int] = set()

    def __iter__(self) -> Iterator[tuple[int, torch.Tensor]]:
        from core.progress import Progress
        from core.speech.stream import ChunkedVocoder

        model, codec = self.inference.model, self.inference.codec
        gap = torch.zeros(int(SILENCE_S * codec.sample_rate))
        audio = [_TextAudio([ChunkedVocoder(CodecVocoder(codec, speed), plan, codec.frame_rate) for _ in text.ids], gap)
                 for text, plan, speed in zip(self.texts, self.plans, self.speeds)]
        rows = sorted(((t, s) for t, text in enumerate(self.texts) for s in range(len(text.ids))), key=lambda row: row[::-1])
        generator = torch.Generator().manual_seed(self.seed)
        progress = Progress("synthesize", total=len(rows))
        for first in range(0, len(rows), SENTENCE_BATCH):
            group = [row for row in rows[first : first + SENTENCE_BATCH] if row[0] not in self.stopped]
            ids = [self.texts[t].ids[s] for t, s in group]
            dropped: set[int] = set()
            steps = model.generate_steps(ids, self.ref_mel, *self.sampling, self.max_codes, self.use_cache, generator,
                                         [MIN_CODES_PER_TEXT_TOKEN * len(i) for i in ids], dropped)
            for step in steps if group else ():
                for row, code in enumerate(step):
                    t, s = group[row]
                    if code is not None:
                        self.codes[t][s].append(code)
                        audio[t].add(s, code)
                    elif row not in dropped:
                        audio[t].end(s)
                yield from self._ready(audio)
                self._check_stop(group, dropped)
            for t, s in group:
                if t not in self.stopped:
                    audio[t].end(s)
            yield from self._ready(audio)
            progress.update(len(group))
        progress.finish()

    def _ready(self, audio: list[_TextAudio]) -> Iterator[tuple[int, torch.Tensor]]:
        for t, text_audio in enumerate(audio):
            if t not in self.stopped:
                for chunk in text_audio.take():
                    yield t, chunk

    def _check_stop(self, group: list[tuple[int, int]], dropped: set[int]) -> None:
        if self.stop is None:
            return
        for t in {t for t, _ in group} - self.stopped:
            if self.stop(t):
                self.stopped.add(t)
                dropped.update(row for row, (owner, _) in enumerate(group) if owner == t)


def synthesize(
    inference: InferenceModel,
    text: str,
    reference: str | Path | None = None,
    temperature: float = 0.8,
    top_k: int | None = 50,
    top_p: float | None = None,
    seed: int = 0,
    language: str | None = None,
    use_cache: bool = True,
    plan: Any = None,
    speed: float = 1.0,
    on_chunk: Callable[[torch.Tensor], None] | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Return (waveform at the codec's sample rate, report with sentences, codes (counts), tokens (each
    sentence's speech codes), stopped (each sentence ended before the model's max_speech_tokens), seconds,
    first_audio_s (from the call to the first chunk) and RTF).

    Long text is spoken sentence by sentence with progress after each (`core.progress`). With `plan`
    (`core.speech.stream.ChunkPlan`) the codes are vocoded in chunks while they are generated and each
    chunk goes to `on_chunk` as it is made; the waveform is their concatenation. `speed` (0.25–4)
    resamples the speech's frames (1 = as generated).
    Raises InputError for empty text, text over MAX_TEXT_CHARS, text in which the tokenizer knows
    no letter or digit (before anything is generated), or an unreadable reference.
    """
    check_text_length(text)
    start = time.perf_counter()
    ref_mel = reference_mel(inference, reference)
    prepared = prepare_text(inference, text, language)
    spoken = SpokenTexts(inference, [prepared], ref_mel, [plan], [speed], temperature, top_k, top_p, seed, use_cache)
    chunks: list[torch.Tensor] = []
    first: float | None = None
    for _index, chunk in spoken:
        first = first if first is not None else time.perf_counter() - start
        chunks.append(chunk)
        if on_chunk is not None:
            on_chunk(chunk)
    wav = torch.cat(chunks) if chunks else torch.zeros(0)
    codes = spoken.codes[0]
    elapsed = time.perf_counter() - start
    rate = inference.codec.sample_rate
    seconds = wav.numel() / rate
    report = {
        "sentences": prepared.sentences,
        "codes": [len(c) for c in codes],
        "tokens": codes,
        "stopped": [len(c) < inference.model.config.max_speech_tokens for c in codes],
        "unknown_tokens": prepared.unknown,
        "audio_seconds": round(seconds, 3),
        "wall_seconds": round(elapsed, 3),
        "first_audio_s": None if first is None else round(first, 3),
        "rtf": round(elapsed / seconds, 4) if seconds else None,
        "sample_rate": rate,
        "device": str(next(inference.model.parameters()).device),
    }
    return wav, report


def generate_text(
    inference: InferenceModel,
    prompt: str,
    max_new_tokens: int = 64,
    temperature: float = 0.8,
    top_k: int | None = 50,
    top_p: float | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Return the LM's continuation of `prompt`: text, ids, token count and tokens per second."""
    tok = inference.tokenizer
    start = time.perf_counter()
    ids = inference.model.generate(
        tok.encode(normalize_text(prompt)), max_new_tokens, temperature, top_k, top_p,
        generator=torch.Generator().manual_seed(seed),
    )
    elapsed = time.perf_counter() - start
    return {
        "prompt": prompt,
        "text": tok.decode(ids),
        "ids": ids,
        "tokens": len(ids),
        "tokens_per_s": round(len(ids) / elapsed, 1) if elapsed > 0 else None,
        "device": str(next(inference.model.parameters()).device),
    }

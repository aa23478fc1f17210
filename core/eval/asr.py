"""Intelligibility of English speech judged by an independent recognizer, PocketSphinx.

Two questions are asked of each clip:
- sentence identification: decode with a JSGF grammar whose alternatives are all the
  held-out sentences and map the hypothesis to the alternative with the fewest word errors
  (a search that ends before the grammar's final state still identifies its sentence; an
  empty hypothesis identifies none). Chance is 1/N. The grammar search scores 16 Gaussians
  per frame instead of PocketSphinx's default 4: on espeak's `en-us+m3` voice that lifted
  identification of 16 sentences from 10 to 14 at under 2x the (small) cost.
- free decoding with PocketSphinx's US-English language model, scored by word error rate
  (`jiwer`) against the sentence text.

The model (acoustic model, dictionary, language model) ships inside the `pocketsphinx` wheel;
nothing is downloaded. Words missing from its dictionary are dropped from the grammar and
reported, since the recognizer could never output them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import jiwer
import numpy as np
import torch

from core.errors import InputError

SAMPLE_RATE = 16000
PAD_SECONDS = 0.25
GRAMMAR_NAME = "sentences"
GRAMMAR_TOPN = 16
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)*")


def normalize_words(text: str) -> list[str]:
    """Return the lower-case words of `text` (letters and inner apostrophes), punctuation dropped."""
    return _WORD.findall(text.lower())


def _model_dir() -> Path:
    import pocketsphinx

    return Path(pocketsphinx.get_model_path()) / "en-us"


@lru_cache(maxsize=1)
def dictionary_words() -> frozenset[str]:
    """Return the words of the US-English pronunciation dictionary shipped with PocketSphinx."""
    words = set()
    with open(_model_dir() / "cmudict-en-us.dict", encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                words.add(line.split(maxsplit=1)[0].split("(")[0])
    return frozenset(words)


def _decoder(**options: object):
    from pocketsphinx import Config, Decoder

    model = _model_dir()
    config = Config(
        hmm=str(model / "en-us"),
        dict=str(model / "cmudict-en-us.dict"),
        loglevel="FATAL",
        cmn="batch",
        bestpath=False,
        **options,
    )
    return Decoder(config)


def _pcm16(wav: torch.Tensor | np.ndarray) -> bytes:
    """Return `wav` (16 kHz float) padded with silence at both ends as 16-bit little-endian PCM."""
    samples = torch.as_tensor(wav, dtype=torch.float32).cpu().numpy()
    pad = np.zeros(int(PAD_SECONDS * SAMPLE_RATE), dtype=np.float32)
    samples = np.concatenate([pad, samples, pad])
    return (np.clip(samples, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()


def _decode(decoder, wav: torch.Tensor | np.ndarray) -> str:
    decoder.start_utt()
    decoder.process_raw(_pcm16(wav), full_utt=True)
    decoder.end_utt()
    hyp = decoder.hyp()
    return " ".join(normalize_words(hyp.hypstr)) if hyp is not None else ""


@lru_cache(maxsize=1)
def _free_decoder():
    return _decoder()


def free_transcription(wav: torch.Tensor | np.ndarray) -> str:
    """Return PocketSphinx's free (US-English language model) transcription of a 16 kHz clip, lower-case words."""
    return _decode(_free_decoder(), wav)


def word_error_rate(references: Sequence[str], hypotheses: Sequence[str]) -> float:
    """Return the corpus word error rate of `hypotheses` against `references` (normalised words).

    Raises ValueError when the lists differ in length or every reference is empty.
    """
    if len(references) != len(hypotheses):
        raise ValueError(f"{len(references)} references but {len(hypotheses)} hypotheses")
    refs = [" ".join(normalize_words(r)) for r in references]
    hyps = [" ".join(normalize_words(h)) for h in hypotheses]
    kept = [(r, h) for r, h in zip(refs, hyps) if r]
    if not kept:
        raise ValueError("every reference sentence is empty")
    return float(jiwer.wer([r for r, _ in kept], [h for _, h in kept]))


@dataclass
class SphinxJudge:
    """A PocketSphinx recognizer primed with the held-out `sentences` (English)."""

    sentences: list[str]
    alternatives: list[str] = field(init=False)
    out_of_vocabulary: list[str] = field(init=False)

    def __post_init__(self) -> None:
        if len(self.sentences) < 2:
            raise InputError(f"sentence identification needs at least 2 sentences, got {len(self.sentences)}.")
        known = dictionary_words()
        self.alternatives = []
        missing: set[str] = set()
        for sentence in self.sentences:
            words = normalize_words(sentence)
            missing.update(w for w in words if w not in known)
            self.alternatives.append(" ".join(w for w in words if w in known))
        self.out_of_vocabulary = sorted(missing)
        usable = [a for a in self.alternatives if a]
        if not usable:
            raise InputError("no held-out sentence has a word PocketSphinx's English dictionary knows; "
                             "use the DTW judge for this language.")
        grammar = "#JSGF V1.0;\ngrammar sentences;\npublic <s> = " + " | ".join(
            f"( {a} )" for a in dict.fromkeys(usable)
        ) + " ;\n"
        self._grammar_decoder = _decoder(lm=None, topn=GRAMMAR_TOPN)
        self._grammar_decoder.add_jsgf_string(GRAMMAR_NAME, grammar)
        self._grammar_decoder.activate_search(GRAMMAR_NAME)

    def identify(self, wav: torch.Tensor | np.ndarray) -> int | None:
        """Return the index of the sentence a 16 kHz clip is recognised as, or None when the
        grammar search found no words."""
        hypothesis = _decode(self._grammar_decoder, wav)
        if not hypothesis:
            return None
        errors = [jiwer.wer(a, hypothesis) if a else float("inf") for a in self.alternatives]
        return int(np.argmin(errors))

    def transcribe(self, wav: torch.Tensor | np.ndarray) -> str:
        """Return the free (language-model) transcription of a 16 kHz clip, lower-case words."""
        return free_transcription(wav)

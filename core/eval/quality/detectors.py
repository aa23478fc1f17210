"""Failure detectors: pure functions over generated speech tokens, texts and DTW distances.

Each returns a `Flag` — the measured number, the threshold it is compared with, whether it fired,
and one sentence in words. The thresholds are module constants (documented in docs/concepts/quality.md);
callers may pass others.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

# Share of sentences allowed to hit the token cap before `no_stop` fires.
NO_STOP_SHARE = 0.1
# Share of sentences allowed outside the training data's 1st–99th percentile of tokens per character.
LENGTH_OUT_SHARE = 0.2
LENGTH_PERCENTILES = (1.0, 99.0)
# The percentiles are widened by this share on each side: with a few dozen clips they sit on the extremes.
LENGTH_MARGIN = 0.15
# A sentence loops when one periodic run (period ≤ LOOP_MAX_PERIOD) covers ≥ LOOP_COVER of its tokens;
# `loops` fires when more than LOOP_SHARE of the sentences loop.
LOOP_MAX_PERIOD = 16
LOOP_COVER = 0.5
LOOP_SHARE = 0.1
# Prompt copying: n-gram size, and how much more of the output than of the real target may be found in the prompt.
COPY_NGRAM = 4
COPY_EXCESS = 0.2
# Text ignored fires when identification is within this many standard errors of chance.
TEXT_IGNORED_SIGMAS = 2.0


@dataclass(frozen=True)
class Flag:
    """One failure detector's verdict."""

    name: str
    value: float | None
    threshold: float
    flagged: bool
    words: str

    def as_dict(self) -> dict[str, Any]:
        """Return the flag as JSON-ready fields."""
        return asdict(self)


def no_stop(stopped: Sequence[bool], threshold: float = NO_STOP_SHARE) -> Flag:
    """Return the `no_stop` flag: the share of sentences whose generation ended at the token cap
    (`stopped[i]` False) against `threshold`. Raises ValueError for no sentences."""
    if not stopped:
        raise ValueError("no_stop needs at least one sentence")
    share = sum(1 for s in stopped if not s) / len(stopped)
    flagged = share > threshold
    words = (f"{share:.0%} of sentences ran to the token cap without stopping" if flagged
             else f"{share:.0%} of sentences hit the token cap (allowed {threshold:.0%})")
    return Flag("no_stop", round(share, 4), threshold, flagged, words)


def tokens_per_char(token_counts: Sequence[int], texts: Sequence[str]) -> list[float]:
    """Return speech tokens per text character (spaces not counted) for each (count, text) pair."""
    return [count / max(1, len("".join(text.split()))) for count, text in zip(token_counts, texts)]


def length_bounds(rates: Sequence[float], percentiles: tuple[float, float] = LENGTH_PERCENTILES,
                  margin: float = LENGTH_MARGIN) -> tuple[float, float]:
    """Return the (low, high) percentiles of tokens-per-character `rates` (the training data's), widened
    by `margin` (low × (1 − margin), high × (1 + margin)). Raises ValueError for fewer than 2 rates."""
    if len(rates) < 2:
        raise ValueError(f"length bounds need at least 2 clips, got {len(rates)}")
    low, high = np.percentile(np.asarray(rates, dtype=float), percentiles)
    return float(low) * (1 - margin), float(high) * (1 + margin)


def length_out_of_range(rates: Sequence[float], bounds: tuple[float, float], threshold: float = LENGTH_OUT_SHARE) -> Flag:
    """Return the `length_out_of_range` flag: the share of outputs whose tokens per character lie
    outside `bounds` (the training data's 1st–99th percentile) against `threshold`.
    Raises ValueError for no outputs."""
    if not rates:
        raise ValueError("length_out_of_range needs at least one output")
    low, high = bounds
    outside = [r for r in rates if r < low or r > high]
    share = len(outside) / len(rates)
    flagged = share > threshold
    words = (f"{share:.0%} of outputs are too long or too short for their text "
             f"(training data: {low:.2f}–{high:.2f} tokens per character)" if flagged
             else f"{share:.0%} of outputs outside {low:.2f}–{high:.2f} tokens per character")
    return Flag("length_out_of_range", round(share, 4), threshold, flagged, words)


def longest_repeat_share(tokens: Sequence[int], max_period: int = LOOP_MAX_PERIOD) -> float:
    """Return the share of `tokens` covered by the longest periodic run: a stretch in which every
    token equals the one `p` places before it (1 ≤ p ≤ `max_period`), counted with its first period.
    A run must repeat its pattern at least twice; 0.0 for fewer than 2 tokens."""
    n = len(tokens)
    if n < 2:
        return 0.0
    seq = np.asarray(tokens)
    best = 0
    for period in range(1, min(max_period, n // 2) + 1):
        equal = seq[period:] == seq[:-period]
        run = longest = 0
        for same in equal:
            run = run + 1 if same else 0
            longest = max(longest, run)
        if longest >= period:  # the pattern occurs at least twice in a row
            best = max(best, longest + period)
    return best / n


def loops(token_lists: Sequence[Sequence[int]], cover: float = LOOP_COVER, threshold: float = LOOP_SHARE) -> Flag:
    """Return the `loops` flag: the share of outputs in which one repeated run covers ≥ `cover` of the
    speech tokens, against `threshold`. Raises ValueError for no outputs."""
    if not token_lists:
        raise ValueError("loops needs at least one output")
    looping = [longest_repeat_share(t) >= cover for t in token_lists]
    share = sum(looping) / len(looping)
    flagged = share > threshold
    words = (f"{share:.0%} of outputs repeat one stretch of speech over ≥ {cover:.0%} of their length" if flagged
             else f"{share:.0%} of outputs loop (allowed {threshold:.0%})")
    return Flag("loops", round(share, 4), threshold, flagged, words)


def _ngrams(tokens: Sequence[int], n: int) -> list[tuple[int, ...]]:
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def ngram_share_in(tokens: Sequence[int], source: Sequence[int], n: int = COPY_NGRAM) -> float | None:
    """Return the share of `tokens`' n-grams that occur in `source` (None when `tokens` has no n-gram)."""
    grams = _ngrams(list(tokens), n)
    if not grams:
        return None
    known = set(_ngrams(list(source), n))
    return sum(1 for g in grams if g in known) / len(grams)


def prompt_copying(outputs: Sequence[Sequence[int]], prompts: Sequence[Sequence[int]], targets: Sequence[Sequence[int]],
                   threshold: float = COPY_EXCESS, n: int = COPY_NGRAM) -> Flag:
    """Return the `prompt_copying` flag: mean share of each output's speech-token n-grams found in its
    reference prompt, minus the same share for the real target speech of the sentence (what speaking
    the text in that voice shares with the prompt by nature); fires when the excess is > `threshold`.
    Raises ValueError when the three lists differ in length or are empty."""
    if not outputs or not (len(outputs) == len(prompts) == len(targets)):
        raise ValueError(f"prompt_copying needs one prompt and target per output ({len(outputs)}, {len(prompts)}, {len(targets)})")
    out = [ngram_share_in(o, p, n) for o, p in zip(outputs, prompts)]
    real = [ngram_share_in(t, p, n) for t, p in zip(targets, prompts)]
    out_mean = float(np.mean([v for v in out if v is not None])) if any(v is not None for v in out) else 0.0
    real_mean = float(np.mean([v for v in real if v is not None])) if any(v is not None for v in real) else 0.0
    excess = out_mean - real_mean
    flagged = excess > threshold
    words = (f"outputs reuse the prompt's speech: {out_mean:.0%} of their {n}-grams are in the prompt, "
             f"against {real_mean:.0%} for the real speech" if flagged
             else f"{out_mean:.0%} of output {n}-grams found in the prompt (real speech: {real_mean:.0%})")
    return Flag("prompt_copying", round(excess, 4), threshold, flagged, words)


def chance_margin(count: int, sigmas: float = TEXT_IGNORED_SIGMAS) -> float:
    """Return the identification accuracy that `count` sentences must exceed to be above chance:
    1/count plus `sigmas` binomial standard errors."""
    chance = 1.0 / count
    return chance + sigmas * math.sqrt(chance * (1 - chance) / count)


def text_ignored(output_to_reference: np.ndarray, output_to_output: np.ndarray, sigmas: float = TEXT_IGNORED_SIGMAS) -> Flag:
    """Return the `text_ignored` flag from DTW distances: [i, j] from output i to reference j, and
    between outputs. Its value is the DTW identification accuracy (output i nearest reference i);
    it fires when that is within `sigmas` standard errors of chance, or when outputs of different
    texts are on average closer to each other than to their own references.
    Raises ValueError for fewer than 2 outputs or matrices of the wrong shape."""
    count = output_to_reference.shape[0]
    if count < 2 or output_to_reference.shape != (count, count) or output_to_output.shape != (count, count):
        raise ValueError(f"text_ignored needs square matrices over ≥ 2 outputs, got {output_to_reference.shape}, "
                         f"{output_to_output.shape}")
    accuracy = float(np.mean(output_to_reference.argmin(axis=1) == np.arange(count)))
    margin = chance_margin(count, sigmas)
    own = float(np.mean(np.diag(output_to_reference)))
    off = ~np.eye(count, dtype=bool)
    between = float(np.mean(output_to_output[off]))
    at_chance, alike = accuracy <= margin, between < own
    words = (f"outputs for different texts are closer to each other ({between:.2f}) than to their references ({own:.2f})"
             if alike else f"sentence identification {accuracy:.0%} is at chance (needs > {margin:.0%})" if at_chance
             else f"sentence identification {accuracy:.0%} (chance {1 / count:.0%}, needs > {margin:.0%})")
    return Flag("text_ignored", round(accuracy, 4), round(margin, 4), at_chance or alike, words)

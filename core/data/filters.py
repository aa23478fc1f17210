"""Dataset filters with measured values: duration, clipping, SNR, silence trimming (VAD), text digits,
speech rate and exact/near-duplicate audio.

`check_clip` measures one clip (and trims its leading/trailing silence); `dataset_rejects` then finds
speech-rate outliers and duplicates across the clips that passed. The thresholds and which filters run
are a `core.data.filter_config.FilterConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections import Counter
from statistics import median
from typing import Any

import numpy as np
import torch

from core.amharic_numbers import verbalize_numbers
from core.data.filter_config import FilterConfig
from core.data.measures import clipping_share, fingerprint, fingerprint_distance, fingerprint_keys, pcm_digest, snr_db
from core.data.vad import speech_bounds

VERBALISED_LANGUAGES = ("am",)
MIN_RATE_CLIPS = 5
HISTOGRAM_BIN_S = 1.0
CANDIDATE_KEYS = 3  # shared fingerprint keys that make an earlier clip a near-duplicate candidate
COMMON_KEY = 200  # keys in more clips than this (steady tones, hum) say nothing about identity


@dataclass
class ClipCheck:
    """One clip's measured values, the trimmed waveform and the filter that removed it (None: kept).

    `wav` is None once the clip has been written: the dataset-wide filters read only the measures."""

    values: dict[str, Any]
    wav: torch.Tensor | None
    removed_by: str | None = None
    reason: str = ""
    digest: str = ""
    audio_print: np.ndarray = field(default_factory=lambda: np.zeros((0, 15), bool))


def _trim(wav: torch.Tensor, rate: int, bounds: tuple[float, float], keep: float) -> tuple[torch.Tensor, float, float]:
    """Return (wav with at most `keep` s of silence each side, leading silence, trailing silence) in seconds."""
    total = len(wav) / rate
    lead, trail = bounds[0], max(0.0, total - bounds[1])
    start = int(max(0.0, lead - keep) * rate)
    stop = len(wav) - int(max(0.0, trail - keep) * rate)
    return wav[start:stop], lead, trail


def text_check(text: str, language: str, config: FilterConfig) -> tuple[str, bool, str | None]:
    """Return (text, whether digits were verbalised, reason to remove or None) for the text filter.

    Amharic digits are read out by `core.amharic_numbers`; digits left in a language without a
    number verbaliser are a reason to remove the clip (the audio says words the text does not).
    """
    if not config.on("text") or not any(ch.isdigit() for ch in text):
        return text, False, None
    if language in VERBALISED_LANGUAGES:
        return verbalize_numbers(text), True, None
    return text, False, f"text has digits and no number verbaliser for language {language!r}; write the numbers out"


def check_clip(wav: torch.Tensor, rate: int, text: str, config: FilterConfig) -> ClipCheck:
    """Measure one clip, trim its silence and apply the per-clip filters; return the ClipCheck.

    The values: duration (after trimming), clipping share, SNR in dB, leading/trailing silence and
    speech seconds from the VAD, characters per second of speech.
    """
    samples = wav.numpy()
    values: dict[str, Any] = {"clipping": round(clipping_share(samples), 5), "snr_db": round(snr_db(samples, rate), 1)}
    check = ClipCheck(values, wav)
    bounds = speech_bounds(wav, rate)
    if bounds is None:
        values.update(lead_silence=None, trail_silence=None, speech_s=0.0, chars_per_s=None)
    else:
        if config.on("silence"):
            check.wav, lead, trail = _trim(wav, rate, bounds, config.keep_silence)
        else:
            lead, trail = bounds[0], len(wav) / rate - bounds[1]
        speech = bounds[1] - bounds[0]
        values.update(lead_silence=round(lead, 3), trail_silence=round(trail, 3), speech_s=round(speech, 3),
                      chars_per_s=round(len(text.replace(" ", "")) / speech, 2))
    duration = len(check.wav) / rate
    values["duration"] = round(duration, 4)
    if config.on("duration") and not config.min_duration <= duration <= config.max_duration:
        check.removed_by, check.reason = "duration", f"{duration:.2f}s outside {config.min_duration:g}-{config.max_duration:g}s"
    elif config.on("clipping") and values["clipping"] > config.max_clipping:
        check.removed_by, check.reason = "clipping", f"{values['clipping']:.2%} of samples clipped (max {config.max_clipping:.2%})"
    elif config.on("snr") and values["snr_db"] < config.min_snr:
        check.removed_by, check.reason = "snr", f"SNR {values['snr_db']:.1f} dB below {config.min_snr:g} dB"
    elif config.on("silence") and bounds is None:
        check.removed_by, check.reason = "silence", "the VAD hears no speech"
    if check.removed_by is None and config.on("duplicate"):
        check.digest = pcm_digest(check.wav.numpy())
        check.audio_print = fingerprint(check.wav.numpy(), rate)
    return check


def _rate_outliers(checks: dict[str, ClipCheck], factor: float) -> dict[str, tuple[str, str]]:
    rates = {clip: c.values["chars_per_s"] for clip, c in checks.items() if c.values.get("chars_per_s")}
    if len(rates) < MIN_RATE_CLIPS:
        return {}
    middle = median(rates.values())
    low, high = middle / factor, middle * factor
    return {clip: ("speech_rate", f"{rate:.1f} chars/s of speech outside {low:.1f}-{high:.1f} (median {middle:.1f} × 1/{factor:g}…{factor:g})")
            for clip, rate in rates.items() if not low <= rate <= high}


def _duplicates(checks: dict[str, ClipCheck], near: float) -> dict[str, tuple[str, str]]:
    """Exact duplicates by PCM digest; near-duplicates by fingerprint, compared only with earlier clips
    that share at least `CANDIDATE_KEYS` fingerprint keys (an inverted index, not every pair)."""
    found: dict[str, tuple[str, str]] = {}
    first_of: dict[str, str] = {}
    postings: dict[int, list[int]] = {}
    kept: list[tuple[str, ClipCheck]] = []
    for clip, check in checks.items():
        if check.digest in first_of:
            found[clip] = ("duplicate", f"same audio as {first_of[check.digest]}")
            continue
        first_of[check.digest] = clip
        keys = fingerprint_keys(check.audio_print)
        shared = Counter(i for key in keys for i in postings.get(key, ()) if len(postings[key]) <= COMMON_KEY)
        for index, hits in shared.most_common():
            if hits < CANDIDATE_KEYS:
                break
            other, earlier = kept[index]
            distance = fingerprint_distance(check.audio_print, earlier.audio_print)
            if distance <= near:
                found[clip] = ("duplicate", f"near-duplicate of {other} (fingerprint bit error {distance:.3f} ≤ {near:g})")
                break
        else:
            for key in keys:
                postings.setdefault(key, []).append(len(kept))
            kept.append((clip, check))
    return found


def dataset_rejects(checks: dict[str, ClipCheck], config: FilterConfig) -> dict[str, tuple[str, str]]:
    """Return {clip id: (filter, reason)} for speech-rate outliers and duplicates among the clips in
    `checks` (id → ClipCheck of a clip the per-clip filters kept, in dataset order; the first of a set
    of duplicates stays)."""
    found = _rate_outliers(checks, config.rate_factor) if config.on("speech_rate") else {}
    if config.on("duplicate"):
        found.update(_duplicates({k: v for k, v in checks.items() if k not in found}, config.near_duplicate))
    return found


def duration_histogram(durations: list[float]) -> dict[str, int]:
    """Return clip counts per 1-second duration bin, labelled "0-1", "1-2", …, from the shortest clip's bin to the
    longest's, empty bins between them included (a gap shows as a bin of 0)."""
    counts: dict[int, int] = {}
    for seconds in durations:
        counts[int(seconds // HISTOGRAM_BIN_S)] = counts.get(int(seconds // HISTOGRAM_BIN_S), 0) + 1
    return _filled(counts)


def _filled(counts: dict[int, int]) -> dict[str, int]:
    """Return bin start → clips as labelled bins from the first to the last, empty ones as 0."""
    return {f"{b:g}-{b + 1:g}": counts.get(b, 0) for b in range(min(counts), max(counts) + 1)} if counts else {}


def with_empty_bins(histogram: dict[str, int]) -> dict[str, int]:
    """Return a stored duration histogram (an older summary.json's may leave empty bins out) with every 1-second bin
    from its first to its last, empty ones as 0; a histogram whose labels are not "a-b" seconds is returned as it is."""
    try:
        starts = {int(float(label.split("-")[0])): int(count) for label, count in histogram.items()}
    except (ValueError, TypeError):
        return dict(histogram)
    return _filled(starts)

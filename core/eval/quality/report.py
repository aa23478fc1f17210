"""The quality report of one evaluated checkpoint, and the score `best.pt` follows.

`quality_report(samples, …)` takes what a checkpoint produced for each evaluation sentence (a
`SpokenSample`: text, output clip, reference clip, generated speech tokens, whether generation
stopped, the prompt's and the real target's speech tokens) and returns the `quality` section of an
`eval tts` entry: `flags` ({name: Flag fields}), `flags_raised` (names), `speaker_similarity`,
`mos_estimate`, `cer` (with an `eval.asr` hook), `length_bounds` and `per_sentence` rows.

`quality_score(entry)` orders evaluated checkpoints: fewer raised flags first (in every language
section of a periodic evaluation), then higher intelligibility of the new language (1 − CER from the
ASR hook, else 1 − WER for English, else DTW identification), then lower validation loss;
`score_parts` gives those parts and `best_reason` says them in words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from core.eval.metrics import dtw_costs, dtw_distance_matrix, judge_features
from core.eval.quality import detectors
from core.eval.quality.asr_hook import Transcriber, character_error_rate, transcribe_all
from core.eval.quality.listeners import Embed, mos_estimates, speaker_similarity


@dataclass
class SpokenSample:
    """What a checkpoint produced for one evaluation sentence (clips at 16 kHz)."""

    text: str
    output: torch.Tensor
    reference: torch.Tensor
    tokens: list[int]
    stopped: bool
    prompt_tokens: list[int]
    target_tokens: list[int]
    audio_path: str = ""


def _mean(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return round(float(np.mean(kept)), 4) if kept else None


def _distances(samples: Sequence[SpokenSample]) -> tuple[np.ndarray, np.ndarray]:
    silent = torch.zeros(1600)  # 0.1 s: an empty output still gets (large) distances
    outputs = [judge_features(s.output if s.output.numel() >= 1600 else silent) for s in samples]
    references = [judge_features(s.reference) for s in samples]
    between = np.zeros((len(outputs), len(outputs)))
    for i in range(len(outputs) - 1):  # DTW cost is symmetric: align each pair of outputs once
        between[i, i + 1:] = between[i + 1:, i] = dtw_costs(outputs[i], outputs[i + 1:])
    return dtw_distance_matrix(outputs, references), between


def quality_report(
    samples: Sequence[SpokenSample],
    language: str,
    bounds: tuple[float, float] | None = None,
    embed: Embed | None = None,
    mos: bool = True,
    transcriber: Transcriber | None = None,
) -> dict[str, Any]:
    """Return the quality section for `samples` (≥ 2) in `language`.

    `bounds` is the training data's (1st, 99th) percentile of speech tokens per character; without it
    the real targets' rates are used (`length_bounds_source` says which). `embed` is the family's
    speaker encoder (default Resemblyzer); `mos` switches DNSMOS; `transcriber` is the `eval.asr` hook.
    Raises ValueError for fewer than 2 samples; InputError from the ASR hook.
    """
    if len(samples) < 2:
        raise ValueError(f"a quality report needs at least 2 sentences, got {len(samples)}")
    texts = [s.text for s in samples]
    rates = detectors.tokens_per_char([len(s.tokens) for s in samples], texts)
    source = "training data"
    if bounds is None:
        bounds = detectors.length_bounds(detectors.tokens_per_char([len(s.target_tokens) for s in samples], texts))
        source = "evaluation references"
    to_reference, between = _distances(samples)
    flags = [
        detectors.no_stop([s.stopped for s in samples]),
        detectors.length_out_of_range(rates, bounds),
        detectors.loops([s.tokens for s in samples]),
        detectors.prompt_copying([s.tokens for s in samples], [s.prompt_tokens for s in samples],
                                 [s.target_tokens for s in samples]),
        detectors.text_ignored(to_reference, between),
    ]
    similarity = speaker_similarity([s.output for s in samples], [s.reference for s in samples], embed)
    mos_values = mos_estimates([s.output for s in samples]) if mos else [None] * len(samples)
    transcripts = transcribe_all(transcriber, [s.audio_path for s in samples], language) if transcriber else None
    per_sentence = []
    for i, sample in enumerate(samples):
        row: dict[str, Any] = {
            "sentence": sample.text, "tokens": len(sample.tokens), "stopped": sample.stopped,
            "tokens_per_char": round(rates[i], 4), "loop_share": round(detectors.longest_repeat_share(sample.tokens), 4),
            "prompt_ngram_share": detectors.ngram_share_in(sample.tokens, sample.prompt_tokens),
            "target_prompt_ngram_share": detectors.ngram_share_in(sample.target_tokens, sample.prompt_tokens),
            "dtw_nearest": int(to_reference[i].argmin()),
            "speaker_similarity": similarity[i], "mos_estimate": mos_values[i], "audio": sample.audio_path,
        }
        if transcripts is not None:
            row["transcript"] = transcripts[i]
            row["cer"] = round(character_error_rate([sample.text], [transcripts[i]]), 4) if sample.text.strip() else None
        per_sentence.append(row)
    return {
        "flags": {f.name: f.as_dict() for f in flags},
        "flags_raised": [f.name for f in flags if f.flagged],
        "speaker_similarity": _mean(similarity),
        "mos_estimate": _mean(mos_values) if mos else None,
        "cer": round(character_error_rate(texts, transcripts), 4) if transcripts is not None else None,
        "length_bounds": [round(bounds[0], 4), round(bounds[1], 4)],
        "length_bounds_source": source,
        "per_sentence": per_sentence,
    }


def intelligibility(entry: dict[str, Any]) -> tuple[str, float | None]:
    """Return (measure name, value in [0, 1], higher better) of an `eval tts` entry: 1 − CER of the ASR
    hook, else 1 − WER (English, PocketSphinx), else DTW sentence identification."""
    quality = entry.get("quality") or {}
    model = (entry.get("rows") or {}).get("model") or {}
    if quality.get("cer") is not None:
        return "1 - cer", round(1 - min(1.0, float(quality["cer"])), 4)
    if model.get("wer") is not None:
        return "1 - wer", round(1 - min(1.0, float(model["wer"])), 4)
    value = model.get("dtw_identification")
    return "dtw_identification", None if value is None else float(value)


def raised_flags(entry: dict[str, Any]) -> list[str]:
    """Return the failure flags an eval.json entry raised: its own (the new language's), then those of its
    base-language section as `<language>:<flag>` (periodic evaluation)."""
    raised = list((entry.get("quality") or {}).get("flags_raised") or [])
    base = (entry.get("sections") or {}).get("base_language") or {}
    raised += [f"{base.get('language')}:{name}" for name in base.get("flags_raised") or []]
    return raised


def quality_score(entry: dict[str, Any], val_loss: float | None) -> tuple[float, float, float]:
    """Return the sort key of an evaluated checkpoint, smaller is better: (failure flags raised, in every
    language section; −intelligibility of the new language; validation loss); a missing number sorts last."""
    _, value = intelligibility(entry)
    return (float(len(raised_flags(entry))), -value if value is not None else 0.0,
            val_loss if val_loss is not None else float("inf"))


def score_parts(entry: dict[str, Any], val_loss: float | None) -> dict[str, Any]:
    """Return the parts of the quality score of `entry`, in the order they are compared: `flags_raised`
    (names), `intelligibility` ({measure, value}) and `val_loss`."""
    name, value = intelligibility(entry)
    return {"flags_raised": raised_flags(entry), "intelligibility": {"measure": name, "value": value},
            "val_loss": val_loss}


def best_reason(entry: dict[str, Any], val_loss: float | None, previous_step: int | None) -> str:
    """Return why the checkpoint of `entry` is best, in words: each part of the score, then whom it beats."""
    parts = score_parts(entry, val_loss)
    raised = parts["flags_raised"]
    flags = "no failure flag" if not raised else f"{len(raised)} flag(s) ({', '.join(raised)})"
    measure, value = parts["intelligibility"]["measure"], parts["intelligibility"]["value"]
    loss = f", val loss {val_loss:.4f}" if val_loss is not None else ""
    since = f"; beats step {previous_step}" if previous_step is not None else "; first evaluation"
    shown = "n/a" if value is None else f"{value:.3f}"
    return f"step {entry.get('step')}: {flags}, then {measure} {shown}{loss}{since}"

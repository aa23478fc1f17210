"""Periodic evaluation during TTS training (`schedule.eval_every`) and `best` chosen by an eval metric
(or by the quality score, the default where evaluation runs: see core.eval.quality.report).

Each evaluation speaks the run's fixed evaluation set (core.training.eval_set), one `eval tts` per
language section; `core.eval.sections.entry_with_sections` joins them into one eval.json entry (the new
language's result at the top, `sections` per language). `eval_metrics(entry)` flattens an entry into the
numbers logged as a `split: eval` line of metrics.jsonl; `metric_value` reads the
`schedule.best_metric` from them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.eval.sections import SECTION_ROW_KEYS
from core.runs import read_evaluations
from core.training.run_config import BEST_METRICS

# best_metric → key of the flattened eval metrics it reads.
METRIC_KEYS = {"eval_mcd": "mcd_db", "eval_dtw_accuracy": "dtw_identification",
               "eval_sphinx_accuracy": "sphinx_identification"}
LOGGED = ("mcd_db", "log_f0_ratio", "duration_ratio", "dtw_identification", "sphinx_identification", "wer")


def eval_metrics(result: dict[str, Any]) -> dict[str, float]:
    """Return the numbers of an `eval tts` result or periodic eval entry logged as a `split: eval` line
    (None values left out): the model row's metrics by name, the codec ceiling as `codec_<name>`
    (absent for model families), `chance`, `seconds`, `flags_raised` (a count), and the base-language
    section's numbers as `base_<name>`."""
    out: dict[str, float] = {}
    for row_name, prefix in (("model", ""), ("codec", "codec_")):
        row = result["rows"].get(row_name) or {}  # no codec row for a model family
        out.update({prefix + key: float(row[key]) for key in LOGGED if row.get(key) is not None})
    out["chance"] = float(result["chance"])
    out["seconds"] = float(result["seconds"])
    if "flags_raised" in (result.get("quality") or {}):
        out["flags_raised"] = float(len(result["quality"]["flags_raised"]))
    base = (result.get("sections") or {}).get("base_language") or {}
    for key in (*SECTION_ROW_KEYS, "speaker_similarity", "mos_estimate", "cer"):
        if base.get(key) is not None:
            out[f"base_{key}"] = float(base[key])
    if base.get("flags_raised") is not None:
        out["base_flags_raised"] = float(len(base["flags_raised"]))
    return out


def metric_value(best_metric: str, metrics: dict[str, float]) -> float | None:
    """Return the value `best_metric` reads from flattened eval metrics (None when not computed)."""
    return metrics.get(METRIC_KEYS[best_metric])


def is_better(best_metric: str, value: float, best: float | None) -> bool:
    """Return whether `value` beats `best` for `best_metric` (ties go to the newer checkpoint)."""
    if best is None:
        return True
    return value <= best if BEST_METRICS[best_metric] else value >= best


def best_recorded(eval_json: Path, best_metric: str, up_to_step: int) -> float | None:
    """Return the best `best_metric` value among the eval.json entries at steps ≤ `up_to_step` (resume)."""
    best = None
    for entry in read_evaluations(eval_json).values():
        if int(entry.get("step", 0)) > up_to_step:
            continue
        value = metric_value(best_metric, eval_metrics(entry))
        if value is not None and is_better(best_metric, value, best):
            best = value
    return best


def best_quality_recorded(eval_json: Path, up_to_step: int) -> tuple[tuple[float, float, float], int] | None:
    """Return (quality score, step) of the best eval.json entry at steps ≤ `up_to_step` (resume of a
    `best_metric: quality` run), or None when there is none."""
    from core.eval.quality.report import quality_score

    best = None
    for entry in read_evaluations(eval_json).values():
        step = int(entry.get("step", 0))
        if step > up_to_step or "quality" not in entry:
            continue
        score = quality_score(entry, entry.get("val_loss"))
        if best is None or score <= best[0]:
            best = (score, step)
    return best

"""Periodic evaluation during TTS training (`schedule.eval_every`) and `best` chosen by an eval metric
(or by the quality score: `best_metric: quality`, see core.eval.quality.report).

`heldout_set(config, settings)` returns the fixed held-out sentences, their references and the
language: by default the first `eval.count` clips of the run's own val split (the dataset's clips
as references). `eval_metrics(result)` flattens an `eval tts` result into the numbers logged as a
`split: eval` line of metrics.jsonl; `metric_value` reads the `schedule.best_metric` from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.config import Settings
from core.errors import InputError
from core.runs import read_evaluations
from core.training.run_config import BEST_METRICS, RunConfig

# best_metric → key of the flattened eval metrics it reads.
METRIC_KEYS = {"eval_mcd": "mcd_db", "eval_dtw_accuracy": "dtw_identification",
               "eval_sphinx_accuracy": "sphinx_identification"}
LOGGED = ("mcd_db", "log_f0_ratio", "duration_ratio", "dtw_identification", "sphinx_identification", "wer")


@dataclass
class HeldoutSet:
    """What every periodic evaluation of a run uses."""

    sentences: list[str]
    references: Any  # `espeak`, a folder, or one clip path per sentence
    language: str
    source: str


def heldout_set(config: RunConfig, settings: Settings) -> HeldoutSet:
    """Return the run's fixed held-out set for periodic evaluation.

    Raises InputError when the sentences file or manifest cannot be read, the val split holds
    fewer than 2 clips of one language, or `references: dataset` has no clips to use.
    """
    from core.eval.tts import ESPEAK, read_sentences
    from core.data.manifest import load_manifest_rows
    from core.data.splits import VAL, split_of

    spec = config.eval
    if spec.sentences:
        sentences, clips = read_sentences(settings.resolve(spec.sentences))
        sentences, clips = sentences[: spec.count], (clips[: spec.count] if clips else None)
        language, source = spec.language or "en", str(spec.sentences)
    else:
        if not config.data.manifest:
            raise InputError(f"{config.source}: periodic eval needs data.manifest or eval.sentences.")
        rows = [r for r in load_manifest_rows(settings.resolve(config.data.manifest))
                if split_of(r.id, config.data.val_ratio) == VAL]
        language = spec.language or (rows[0].language if rows else "en")
        rows = [r for r in rows if r.language == language][: spec.count]
        if len(rows) < 2:
            raise InputError(
                f"{config.data.manifest}: {len(rows)} val clip(s) in language {language!r}; periodic eval needs at "
                "least 2. Raise data.val_ratio or set eval.sentences."
            )
        sentences, clips = [r.text for r in rows], [r.path for r in rows]
        source = f"{config.data.manifest} (val split)"
    if len(sentences) < 2:
        raise InputError(f"{source}: {len(sentences)} sentence(s); periodic eval needs at least 2.")
    if spec.references == "dataset":
        if clips is None:
            raise InputError(f"{source}: eval.references dataset needs a manifest.jsonl; use espeak or a folder.")
        references: Any = clips
    elif spec.references == "espeak":
        references = ESPEAK
    else:
        references = settings.resolve(spec.references)
    return HeldoutSet(sentences, references, language, source)


def eval_metrics(result: dict[str, Any]) -> dict[str, float]:
    """Return the numbers of an `eval tts` result logged as a `split: eval` line (None values left out):
    the model row's metrics by name, the codec ceiling as `codec_<name>` (absent for model families),
    `chance` and `seconds`."""
    out: dict[str, float] = {}
    for row_name, prefix in (("model", ""), ("codec", "codec_")):
        row = result["rows"].get(row_name) or {}  # no codec row for a model family
        out.update({prefix + key: float(row[key]) for key in LOGGED if row.get(key) is not None})
    out["chance"] = float(result["chance"])
    out["seconds"] = float(result["seconds"])
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

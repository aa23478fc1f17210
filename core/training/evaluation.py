"""A run's evaluation and its choice of `best.pt`, beside the trainer's loop (`core.training.trainer`).

`RunEvaluation` holds what a run knows about its best checkpoint and its base-language retention:
the lowest validation loss, the best `schedule.best_metric` value or quality score, step 0's
`val_base_loss`, and the run's fixed evaluation set. The trainer tells it each saved checkpoint
(`after_save`) and asks it to `evaluate` every `eval_every`-th one (tts, rank 0): one `eval tts` per
language section of the evaluation set (`core.training.eval_set`), joined into one eval.json entry,
a `split: eval` metrics line, the retention check, and `best.pt` refreshed when the checkpoint beats
the best so far by the run's best metric (`best_metric_of`: the quality score by default where
evaluation runs, see `core.eval.quality.report`). A failed evaluation is logged only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from core.config import Settings
from core.errors import InputError
from core.runs import RunFolder, eval_file_beside
from core.training.log import RunLog
from core.training.run_config import RunConfig, best_metric_of
from core.training.state import link_as_best, restore_rng, rng_state


class RunEvaluation:
    """A run's periodic evaluation, retention check and best-checkpoint choice (see the module docstring).

    `validate_base()` returns the teacher-forced loss on the base-language val samples (None without
    any); `model_dir` is the model folder a family speaks with (None for LinguaForge's own models).
    """

    def __init__(self, config: RunConfig, folder: RunFolder, settings: Settings, log: RunLog, model_dir: Path | None,
                 validate_base: Callable[[], float | None]) -> None:
        self.config, self.folder, self.settings, self.log = config, folder, settings, log
        self.model_dir = model_dir
        self.validate_base = validate_base
        self.best_metric = best_metric_of(config)  # `auto` resolved: quality where periodic evaluation runs
        self.best_val: float | None = None  # the lowest validation loss so far
        self.best_eval: float | None = None  # the best `best_metric` value so far (eval metrics)
        self.best_quality: tuple[tuple[float, float, float], int] | None = None  # (score, step) of best.pt
        self.last_val_loss: float | None = None
        self.retention_start: float | None = None  # val_base_loss at step 0
        self.eval_set: Any = None  # the run's fixed evaluation set (eval_set.json), read or chosen at the first eval

    def resume(self, extra: dict[str, Any], checkpoint: Path, step: int) -> None:
        """Continue from a checkpoint's extras: its best validation loss, step 0's `val_base_loss`, and the best
        recorded in eval.json up to `step`."""
        from core.training.periodic_eval import best_quality_recorded, best_recorded

        self.best_val = extra.get("best_val_loss")
        self.retention_start = extra.get("val_base_loss_start")
        if self.best_metric == "quality":
            self.best_quality = best_quality_recorded(eval_file_beside(checkpoint), step)
        elif self.best_metric != "val_loss":
            self.best_eval = best_recorded(eval_file_beside(checkpoint), self.best_metric, step)

    def note_val_loss(self, val_loss: float | None) -> bool:
        """Record the validation loss of the checkpoint about to be saved; return whether it is the lowest so far."""
        self.last_val_loss = val_loss
        is_best = val_loss is not None and (self.best_val is None or val_loss <= self.best_val)
        if is_best:
            self.best_val = val_loss  # the checkpoint records the best validation loss up to and including its own
        return is_best

    def checkpoint_extra(self) -> dict[str, Any]:
        """Return what a checkpoint carries for a resume: the best validation loss and step 0's `val_base_loss`."""
        return {"best_val_loss": self.best_val, "val_base_loss_start": self.retention_start}

    def after_save(self, path: Path, step: int, is_best: bool) -> None:
        """Link `best.pt` to the saved `path` when the run chooses by validation loss and it is the lowest."""
        if is_best and self.best_metric == "val_loss":
            link_as_best(path)
            self.log.update_status(best={"metric": "val_loss", "step": step, "value": self.best_val,
                                         "why": f"step {step}: lowest validation loss so far, {self.best_val:.4f}"})

    def evaluate(self, checkpoint: Path, step: int) -> dict[str, float] | None:
        """Evaluate a saved checkpoint on the run's fixed evaluation set (a model family speaks through its
        Speaker with the run's model folder): one `eval tts` per language section, joined into one eval.json
        entry; log a `split: eval` line; refresh `best.pt` when it beats the best so far by the run's best metric.

        Returns the logged metrics, or None when it failed: its message goes to log.txt and status.json
        (`eval_error`), training goes on.
        """
        from core.eval.tts import update_eval_json
        from core.eval.sections import entry_with_sections
        from core.training.periodic_eval import eval_metrics, is_better, metric_value

        saved_rng = rng_state()
        try:
            eval_set = self.fixed_eval_set(step)
            new = eval_set.section("new_language")
            if not new.usable:
                raise InputError(f"eval_set.json: new-language set {new.note}. Raise data.val_ratio or set eval.sentences.")
            result = self._speak_section(checkpoint, new, record=True)
            base = eval_set.section("base_language")
            base_result = self._speak_section(checkpoint, base, record=False) if base and base.usable else None
        except Exception as exc:  # noqa: BLE001 — training goes on; the reason is logged
            self.log.line(f"eval at step {step} failed: {type(exc).__name__}: {exc}")
            self.log.update_status(eval_error=f"step {step}: {exc}")
            return None
        finally:
            restore_rng(saved_rng)
        retention = self.check_retention(step)
        entry = {**entry_with_sections(result, base_result, eval_set.summary()), "val_loss": self.last_val_loss,
                 **({"retention": retention} if retention is not None else {})}
        update_eval_json(eval_file_beside(checkpoint), checkpoint.name, entry)
        metrics = eval_metrics(entry)
        if retention is not None:
            metrics["val_base_loss"] = retention["val_base_loss"]
            metrics["val_base_loss_change"] = retention["change"]
        self.log.metrics(step, "eval", metrics, tensorboard=False)  # evaluate_checkpoint wrote eval/ scalars
        spoken = " + ".join(f"{len(s.sentences)} {s.language}" for s in (new, base) if s is not None and s.usable)
        self.log.line(f"eval at step {step} ({spoken} sentences): " + ", ".join(f"{k} {v:g}" for k, v in metrics.items()))
        if self.best_metric == "quality":
            self._choose_best_by_quality(checkpoint, entry, step)
        elif self.best_metric != "val_loss":
            value = metric_value(self.best_metric, metrics)
            if value is None:
                self.log.line(f"best_metric {self.best_metric}: not computed at step {step}")
            elif is_better(self.best_metric, value, self.best_eval):
                self.best_eval = value
                link_as_best(checkpoint)
                self.log.update_status(best={"metric": self.best_metric, "value": value, "step": step,
                                             "why": f"step {step}: best {self.best_metric} so far, {value:g}"})
        return metrics

    def fixed_eval_set(self, step: int) -> Any:
        """Return the run's evaluation set: read from eval_set.json, or chosen now and written there (logged)."""
        from core.training.eval_set import eval_spec, fixed_eval_set

        if self.eval_set is None:
            self.eval_set, chosen = fixed_eval_set(self.folder, self.config, self.settings, step)
            sizes = ", ".join(f"{s.role} {len(s.sentences)} {s.language}" + (f" ({s.note})" if s.note else "")
                              for s in self.eval_set.sections)
            how = f"chosen at step {step}" if chosen else f"read from eval_set.json (chosen at step {self.eval_set.chosen_at_step})"
            self.log.line(f"evaluation set {how}: {sizes}")
            if not chosen and self.eval_set.chosen_for != eval_spec(self.config):
                self.log.line("evaluation set kept as chosen although the run config's eval/data keys changed since; "
                              f"delete {self.folder.eval_set_file} to choose it again")
        return self.eval_set

    def _speak_section(self, checkpoint: Path, section: Any, record: bool) -> dict[str, Any]:
        """Return `eval tts` of `checkpoint` on one language section of the evaluation set; a section other than
        the new language's speaks into `eval_audio/<checkpoint stem>/<language>/`, is not recorded alone, and is
        judged by its own references' length range (the checkpoint records the run's training data's)."""
        from core.eval.tts import evaluate_checkpoint
        from core.runs import eval_audio_beside

        audio_dir = None if record else eval_audio_beside(checkpoint) / section.language
        return evaluate_checkpoint(checkpoint, section.sentences, section.references, section.language, self.settings,
                                   wer=self.config.eval.wer, seed=self.config.seed, model_dir=self.model_dir,
                                   options=self.config.eval.synthesis, asr=self.config.eval.asr, mos=self.config.eval.mos,
                                   audio_dir=audio_dir, record=record, recorded_bounds=record)

    def _choose_best_by_quality(self, checkpoint: Path, entry: dict[str, Any], step: int) -> None:
        """Link `best.pt` to `checkpoint` when its quality score (flags, intelligibility, val loss) beats the
        best so far, and say why in status.json (`best`: metric, step, score, parts, why)."""
        from core.eval.quality.report import best_reason, quality_score, score_parts

        val_loss = self.last_val_loss
        score = quality_score(entry, val_loss)
        if self.best_quality is None or score <= self.best_quality[0]:
            previous = self.best_quality[1] if self.best_quality is not None else None
            self.best_quality = (score, step)
            link_as_best(checkpoint)
            reason = best_reason(entry, val_loss, previous)
            self.log.line(f"best.pt → step {step}: {reason}")
            self.log.update_status(best={"metric": "quality", "step": step, "score": list(score),
                                         "parts": score_parts(entry, val_loss), "why": reason})

    def check_retention(self, step: int) -> dict[str, Any] | None:
        """Measure `val_base_loss` now, compare it with step 0's (`retention_start`, saved in each checkpoint),
        write `retention` to status.json and warn in log.txt when it rose by more than `eval.base_loss_warn`.
        Returns the retention record, or None without base-language val samples."""
        from core.training.retention import retention_record

        value = self.validate_base()
        if value is None:
            return None
        record = retention_record(value, step, self.retention_start, self.config.eval.base_loss_warn,
                                  self.config.eval.base_language)
        self.retention_start = record["start"]  # step 0's; checkpoints carry it across resumes
        if record["warning"]:
            self.log.line(f"WARNING: {record['warning']}")
        self.log.update_status(retention=record)
        return record

"""The plan of a training run: what a run config and the settings resolve to, before anything loads.

`train` is plan → doctor → run. `plan_run(config, settings)` names the run's model family, its
model folder, the checkpoint it starts from and the tokenizer file; the doctor
(`core.checks.doctor.doctor_context_from_plan`), the dashboard's preflight and the `Trainer` all
start from it, so the three never disagree on which files a run reads. `family_run` turns the plan
and the loaded tokenizer and base checkpoint into the plain values a family's hooks read
(`core.families.base.FamilyRun`).

The trainer does not import the doctor: whoever runs it (the `train` and `validate` commands,
which jobs, the dashboard and the quickstart journeys run) passes a `Preflight`, a function that
checks a plan (all checks, or those whose id starts with a prefix) and returns the report.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

from core.config import Settings
from core.errors import InputError
from core.families.base import FamilyRun, ModelFamily
from core.families.registry import get_model_family
from core.numbers import SPEECH_SECONDS
from core.tokenizers.tokenizer import Tokenizer
from core.training.run_config import RunConfig

if TYPE_CHECKING:
    from core.checkpoint import LoadedCheckpoint


@dataclass
class LoadedRun:
    """What the trainer has loaded and decided of a plan so far: the tokenizer, base checkpoint, the
    checkpoint it resumes from, its device, model config, feature cache and the ranks it trains on. The doctor uses these
    instead of loading them again."""

    tokenizer: Tokenizer | None = None
    base: LoadedCheckpoint | None = None
    resume_path: Path | None = None
    device: str | None = None
    model_config: dict[str, Any] | None = None
    cache_dir: Path | None = None
    ranks: int = 1
    _resume: LoadedCheckpoint | InputError | None = field(default=None, init=False, repr=False)

    def load_resume(self) -> LoadedCheckpoint | None:
        """Return the checkpoint at `resume_path`, loaded once (None when not resuming).

        Raises InputError (the same one on every call) when it does not load.
        """
        if self.resume_path is None:
            return None
        if self._resume is None:
            try:
                from core.checkpoint import load_checkpoint  # torch: loaded when a plan first needs it

                self._resume = load_checkpoint(self.resume_path)
            except InputError as exc:
                self._resume = exc
        if isinstance(self._resume, InputError):
            raise self._resume
        return self._resume


@dataclass
class RunPlan:
    """A run config resolved against the settings: its family, model folder, base checkpoint and tokenizer file.

    `loaded` holds what the trainer has loaded of it (empty for the doctor's and the dashboard's preflight).
    """

    config: RunConfig
    settings: Settings
    config_path: Path | None
    family: ModelFamily
    model_dir: Path | None
    base_checkpoint: Path | None
    tokenizer_path: Path | None
    loaded: LoadedRun

    def family_run(self, tokenizer: Tokenizer, base: LoadedCheckpoint | None) -> FamilyRun:
        """Return the plain values the family's hooks read for this run, with `tokenizer` and `base` loaded."""
        config, settings = self.config, self.settings
        return FamilyRun(
            source=config.source or "run config",
            task=config.task,
            tokenizer=tokenizer,
            base=base,
            model_dir=self.model_dir,
            model=dict(config.model),
            manifest=settings.resolve(config.data.manifest) if config.data.manifest else None,
            corpus=[settings.resolve(p) for p in config.data.corpus],
            codec_path=settings.resolve(config.codec) if config.codec else None,
            cache_root=settings.resolve("cache"),
            val_ratio=config.data.val_ratio,
            prompts_per_target=config.data.prompts_per_target,
            seed=config.seed,
            text_weight=config.loss.text_weight,
            mel_weight=config.loss.mel_weight,
            options=dict(settings.get(f"families.{self.family.name}") or {}),
            split_by=config.data.split,
        )


class Report(Protocol):
    """What a preflight returns: the doctor's report (`core.checks.doctor.DoctorReport`)."""

    ok: bool

    def render(self) -> str:
        """Return the report as text for the run's log."""

    def raise_for_failures(self) -> None:
        """Raise InputError listing the failures; return None when nothing failed."""


#: checks `plan` (every check, or only those whose id starts with the prefix) and returns the report
Preflight = Callable[[RunPlan, "str | None"], Report]


def resolve_model_dir(config: RunConfig, settings: Settings, family: str) -> Path | None:
    """Return the run's model folder: `model_dir:` of the run config, else `families.<family>.model_dir`
    in settings, else None; an `hf:owner/repo[@revision]` value is the folder `models pull` fills for it
    (from the Hub cache when offline). Raises InputError when it is named but is not a folder, or cannot be pulled."""
    from core.hub import resolve_model_folder

    value = config.model_dir or settings.get(f"families.{family}.model_dir")
    if not value:
        return None
    path = resolve_model_folder(str(value), settings)
    if not path.is_dir():
        where = f"{config.source}: model_dir" if config.model_dir else f"settings families.{family}.model_dir"
        raise InputError(f"{where} {value!r} is not a folder ({path}); point it at your local {family} model folder.")
    return path


def plan_run(config: RunConfig, settings: Settings, config_path: str | os.PathLike[str] | None = None) -> RunPlan:
    """Return the plan of `config`: its model family, model folder, base checkpoint (the run's
    `base_checkpoint`, else the family's published checkpoint in the model folder) and tokenizer file.

    Nothing is loaded. Raises InputError for an unknown family (or one whose package is missing), a
    `model:` key the family does not take (`ModelFamily.check_model_keys`, the check its model config
    makes), an `eval.synthesis` option its speaker does not take or out of its range
    (`ModelFamily.check_speech_options`) and a model folder that is not a folder.
    """
    family = get_model_family(config.family)
    family.check_model_keys(config.model, config.source or "run config")
    synthesis = {key: value for key, value in config.eval.synthesis.items() if key != "max_seconds"}
    family.check_speech_options(synthesis, f"{config.source or 'run config'}.eval.synthesis", temperature=True)
    if "max_seconds" in config.eval.synthesis:
        SPEECH_SECONDS.check(config.eval.synthesis["max_seconds"], f"{config.source or 'run config'}.eval.synthesis.max_seconds")
    model_dir = resolve_model_dir(config, settings, family.name)
    base = settings.resolve(config.base_checkpoint) if config.base_checkpoint else family.default_checkpoint(model_dir)
    return RunPlan(
        config=config,
        settings=settings,
        config_path=Path(config_path).resolve() if config_path else None,
        family=family,
        model_dir=model_dir,
        base_checkpoint=base,
        tokenizer_path=settings.resolve(config.tokenizer) if config.tokenizer else None,
        loaded=LoadedRun(),
    )

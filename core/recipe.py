"""The training recipe, `train` = plan → doctor → run, as the `train` and `validate` commands run it.

`prepare_trainer` plans the run (`core.training.plan.plan_run`) and builds its `Trainer` with the
doctor as the trainer's preflight: every check runs on the plan (with what the trainer has loaded)
before any preprocessing, and the cache checks on the built feature cache; a failure refuses the
start with the doctor's report. Jobs, the dashboard and the quickstart journeys run these commands,
so the doctor runs before every training. This module sits above `core.training` and `core.checks`,
which import neither each other's trainer nor doctor.
"""

from __future__ import annotations

import os
from functools import partial
from typing import Any

from core.checks.doctor import doctor_preflight
from core.config import Settings
from core.training.run_config import RunConfig
from core.training.trainer import Trainer, TrainResult


def prepare_trainer(
    config: RunConfig,
    config_path: str | os.PathLike[str] | None = None,
    settings: Settings | None = None,
    **options: Any,
) -> Trainer:
    """Return the run's Trainer, set up and checked by the doctor (plan → doctor), ready to `run()`;
    `options` are the Trainer's (`resume`, `max_steps`, `reset_optimizer`, `fresh`) and `device_memory`
    (bytes: the doctor's memory plan, and `batch.size: auto`'s choice, must fit a device of this size instead of
    the device's free memory).

    Raises InputError on bad config, data, tokenizer or checkpoint (the doctor's failures
    included), when the run folder holds checkpoints and neither `resume` nor `fresh` is given.
    """
    device_memory = options.pop("device_memory", None)
    preflight = doctor_preflight if device_memory is None else partial(doctor_preflight, device_memory=device_memory)
    return Trainer(config, config_path, settings, preflight=preflight, device_memory=device_memory, **options)


def train(
    config: RunConfig,
    config_path: str | os.PathLike[str] | None = None,
    settings: Settings | None = None,
    **options: Any,
) -> TrainResult:
    """Run one training run (plan → doctor → run) and return its TrainResult; `options` are
    `prepare_trainer`'s (`resume`, `max_steps`, `reset_optimizer`, `fresh`).

    `max_steps` stops this invocation at that step while the learning-rate schedule follows
    `schedule.max_steps`, so a run paused with `--max-steps k` and resumed continues exactly.
    `resume` is `auto` or a checkpoint; `fresh` moves a run already in the folder aside and starts over.
    Raises InputError as `prepare_trainer` does, and InternalError when frozen rows changed.
    """
    return prepare_trainer(config, config_path, settings, **options).run()

"""`python -m core validate --config RUN.yaml`: the validation metrics of the model a run starts from."""

from __future__ import annotations

import argparse

from core.cli.common import Result, add_command
from core.paths import CLI_PATH
from core.tables import render_mapping


def _validate(args: argparse.Namespace) -> Result:
    """Measure a run config's starting model on its validation split (no training step).

    Build the run as `train` does (tokenizer, model, doctor, data) and measure the model it starts
    from — its base checkpoint, or a fresh initialisation — on the run's validation split.
    Nothing is trained and no checkpoint is written. The quickstart journeys run it as a job
    before each training stage (it takes a GPU slot, like `train`).
    """
    from core.config import load_settings
    from core.training.run_config import load_run_config
    from core.recipe import prepare_trainer

    trainer = prepare_trainer(load_run_config(args.config), args.config, load_settings())
    try:
        val = trainer.validate()
    finally:
        trainer.log.close()
    data = {"ok": True, "run_dir": str(trainer.run_dir), "val": val, "val_samples": len(trainer.data.val)}
    shown = {"run_dir": data["run_dir"], "val_samples": data["val_samples"],
             **{f"val_{name}": round(value, 4) for name, value in val.items()}}
    return Result(data, render_mapping(shown))


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the top-level `validate` command."""
    parser = add_command(subparsers, "validate", _validate)
    parser.add_argument("--config", required=True, type=CLI_PATH, help="run config YAML (its paths resolve against the workspace)")

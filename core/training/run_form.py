"""The run config as a flat form (the dashboard's Training tab) and back: pure functions, no UI.

`FORM_KEYS` names the form's fields in order. `form_to_dict(base, values)` lays the values over a
loaded config mapping, `config_from_form(...)` turns that into one validated `RunConfig` (the only
validation a training started from the form gets before submission), and `dict_to_form(data)`
fills the form from a config mapping. `run_config_path(name)` is where the run's config lives.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from core.config import Settings, merge_dicts
from core.errors import InputError
from core.training.run_config import RunConfig, run_config_from_dict

RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
FORM_KEYS = (
    "name", "task", "tokenizer", "base_checkpoint", "codec", "manifest", "corpus", "val_ratio", "model_preset",
    "freeze_mode", "lr", "batch_size", "accumulate", "max_steps", "val_every", "save_every", "precision", "seed",
    "family", "model_dir",
)


def run_config_path(name: str) -> str:
    """Return the workspace-relative config path of run `name`; raises InputError for a bad name."""
    if not RUN_NAME.match(name or ""):
        raise InputError(
            f"run name {name!r}: use letters, digits, '.', '_' or '-' (up to 64), starting with a letter or digit."
        )
    return f"runs/{name}/config.yaml"


def _opt(value: str | None) -> str | None:
    text = (value or "").strip()
    return text or None


def _int(value: Any, where: str) -> int:
    if value is None or float(value) != int(float(value)):
        raise InputError(f"{where}: {value!r} must be a whole number.")
    return int(float(value))


def form_to_dict(base: dict[str, Any], values: Sequence[Any]) -> dict[str, Any]:
    """Return the run config mapping: the loaded `base` with the form's `values` (FORM_KEYS order) on top.

    Raises InputError for a count that is not a whole number, ValueError/TypeError for a non-number.
    """
    form = dict(zip(FORM_KEYS, values))
    corpus = [c.strip() for c in (form["corpus"] or "").split(",") if c.strip()]
    return merge_dicts(base, {
        "name": (form["name"] or "").strip(),
        "task": form["task"],
        "family": form.get("family") or "linguaforge",
        "model_dir": _opt(form.get("model_dir")),
        "tokenizer": _opt(form["tokenizer"]),
        "base_checkpoint": _opt(form["base_checkpoint"]),
        "codec": _opt(form["codec"]),
        "data": {"manifest": _opt(form["manifest"]), "corpus": corpus, "val_ratio": float(form["val_ratio"] or 0)},
        "model": {"preset": form["model_preset"]},
        "freeze": {"mode": form["freeze_mode"]},
        "optim": {"lr": float(form["lr"] or 0)},
        "batch": {"size": _int(form["batch_size"], "batch.size"), "accumulate": _int(form["accumulate"], "batch.accumulate")},
        "schedule": {
            "max_steps": _int(form["max_steps"], "schedule.max_steps"),
            "val_every": _int(form["val_every"], "schedule.val_every"),
            "save_every": _int(form["save_every"], "schedule.save_every"),
        },
        "precision": form["precision"],
        "seed": _int(form["seed"], "seed"),
    })


def dict_to_form(data: dict[str, Any]) -> list[Any]:
    """Return the form values (FORM_KEYS order) for a run config mapping.

    Raises InputError when the mapping is not a valid run config.
    """
    config = run_config_from_dict(data, "preset")
    return [
        config.name, config.task, config.tokenizer or "", config.base_checkpoint or "", config.codec or "",
        config.data.manifest or "", ", ".join(config.data.corpus), config.data.val_ratio,
        config.model.get("preset", "tiny"), config.freeze.mode, config.optim.lr, config.batch.size,
        config.batch.accumulate, config.schedule.max_steps, config.schedule.val_every, config.schedule.save_every,
        config.precision, config.seed, config.family, config.model_dir or "",
    ]


def _check_paths(settings: Settings, data: dict[str, Any]) -> None:
    named = {"tokenizer": data.get("tokenizer"), "base_checkpoint": data.get("base_checkpoint"),
             "codec": data.get("codec"), "data.manifest": data["data"].get("manifest")}
    for i, corpus in enumerate(data["data"].get("corpus") or []):
        named[f"data.corpus[{i}]"] = corpus
    for value in named.values():
        if value:
            settings.check_inside_roots(value)


def config_from_form(base: dict[str, Any], values: Sequence[Any], settings: Settings) -> RunConfig:
    """Return the validated RunConfig of the form: `values` over `base`, every path inside the allowed roots.

    Raises InputError naming the field at fault (a non-number included) or the path outside the roots.
    """
    try:
        data = form_to_dict(base, values)
    except (ValueError, TypeError) as exc:
        raise InputError(str(exc)) from None
    _check_paths(settings, data)
    config = run_config_from_dict(data, "form")
    run_config_path(config.name)
    return config

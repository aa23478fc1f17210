"""The run config as a flat form (the dashboard's Training tab) and back: pure functions, no UI.

`FORM_KEYS` names the form's fields in order. `form_to_dict(base, values)` lays the values over a
loaded config mapping, `config_from_form(...)` turns that into one validated `RunConfig` (the only
validation a training started from the form gets before submission), and `dict_to_form(data)`
fills the form from a config mapping. `run_config_path(name)` is where the run's config lives.
"""

from __future__ import annotations

from typing import Any, Sequence

from core.config import Settings, merge_dicts
from core.confine import check_name
from core.errors import InputError
from core.families.registry import get_model_family
from core.numbers import NumberRange
from core.training.retention import DEFAULT_RETENTION
from core.training.run_config import AUTO_EFFECTIVE, RunConfig, check_config_paths, run_config_from_dict

FORM_KEYS = (
    "name", "task", "tokenizer", "base_checkpoint", "codec", "manifest", "corpus", "val_ratio", "model_preset",
    "freeze_mode", "lr", "batch_size", "accumulate", "max_steps", "val_every", "save_every", "precision", "seed",
    "family", "model_dir", "freeze_until", "adapter_kind", "adapter_rank", "adapter_alpha", "replay_manifest",
    "replay_share", "batch_auto",
)


WHOLE = NumberRange(-(2**53), 2**53, integer=True, words="a whole number")  # a count of the form; its run config key holds the narrower range
OWN_FAMILY = "linguaforge"  # the family whose shape the form's model preset and codec set


def for_family(data: dict[str, Any], family: str) -> tuple[dict[str, Any], list[str]]:
    """Return (the config mapping `data` as a run of `family` trains it, the `model:` keys dropped).

    A published family (chatterbox, indextts) takes its shape from its own files, so the `model:`
    settings a loaded LinguaForge config brings (e.g. `max_speech_tokens`) are dropped, keeping only
    those the family takes (`ModelFamily.model_keys`); the caller shows which. LinguaForge runs keep
    them all. Raises InputError for an unknown family.
    """
    keys = get_model_family(family).model_keys
    model = dict(data.get("model") or {})
    if keys is None:
        return data, []
    dropped = sorted(key for key in model if key not in keys)
    return {**data, "model": {k: v for k, v in model.items() if k in keys}}, dropped


def run_config_path(name: str) -> str:
    """Return the workspace-relative config path of run `name`; raises InputError for a bad name."""
    return f"runs/{check_name(name, 'run name')}/config.yaml"


def _opt(value: str | None) -> str | None:
    text = (value or "").strip()
    return text or None


def _int(value: Any, where: str) -> int:
    return int(WHOLE.check(value, where))


def _until(value: Any) -> int | str:
    """Return the form's freeze boundary: `auto` when empty, a whole number as an int, anything else as
    typed (the run config validator names it)."""
    text = str(value if value is not None else "").strip()
    if text in ("", "auto"):
        return "auto"
    number, problem = WHOLE.problem(text)
    return text if problem is not None else int(number)


def _batch(form: dict[str, Any]) -> dict[str, Any]:
    """Return the form's `batch:`; "as large as fits" (`batch_auto`) makes it `size: auto` with the batch size ×
    accumulate as the samples per step."""
    size, accumulate = _int(form["batch_size"], "batch.size"), _int(form["accumulate"], "batch.accumulate")
    if form.get("batch_auto"):
        return {"size": "auto", "accumulate": 1, "effective": size * accumulate}
    return {"size": size, "accumulate": accumulate, "effective": None}


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
        "data": {"manifest": _opt(form["manifest"]), "corpus": corpus, "val_ratio": float(form["val_ratio"] or 0),
                 "replay": {"manifest": _opt(form.get("replay_manifest")),
                            "share": float(form.get("replay_share") or DEFAULT_RETENTION["share"])}},
        "model": {"preset": form["model_preset"]},
        "freeze": {"mode": form["freeze_mode"], "until": _until(form.get("freeze_until"))},
        "adapter": {"kind": form.get("adapter_kind") or "none", "rank": _int(form.get("adapter_rank", 16), "adapter.rank"),
                    "alpha": float(form.get("adapter_alpha") or 0)},
        "optim": {"lr": float(form["lr"] or 0)},
        "batch": _batch(form),
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
        config.model.get("preset", "tiny"), config.freeze.mode, config.optim.lr,
        *((config.batch.effective or AUTO_EFFECTIVE, 1) if config.batch.auto else (config.batch.size, config.batch.accumulate)),
        config.schedule.max_steps, config.schedule.val_every, config.schedule.save_every,
        config.precision, config.seed, config.family, config.model_dir or "", str(config.freeze.until),
        config.adapter.kind, config.adapter.rank, config.adapter.alpha, config.data.replay.manifest or "",
        config.data.replay.share, config.batch.auto,
    ]


def config_from_form(base: dict[str, Any], values: Sequence[Any], settings: Settings) -> RunConfig:
    """Return the validated RunConfig of the form: `values` over `base`, every path inside the allowed roots
    (those the form shows and those only the loaded `base` holds, such as `eval.sentences`).

    Raises InputError naming the field at fault (a non-number included) or the path outside the roots.
    """
    try:
        data = form_to_dict(base, values)
    except (ValueError, TypeError) as exc:
        raise InputError(str(exc)) from None
    config = run_config_from_dict(data, "form")
    check_config_paths(config, settings)
    run_config_path(config.name)
    return config

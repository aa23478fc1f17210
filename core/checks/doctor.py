"""The preflight doctor: every check that must pass before training, inference or the UI start work.

Checks live in the `core.checks` package, one module per topic, and register themselves with
`@register_check(id, order)`. A check takes a `DoctorContext` and returns a `CheckResult`, a list
of them, or None when it does not apply. `run_doctor(ctx)` runs them all in order; a check that
raises InputError becomes a failure carrying that message, never a traceback. A checkpoint the
checks load themselves is loaded and hashed once per process per file version (`load_checkpoint_once`),
so the dashboard's live preflight does not read the base checkpoint again on every form change.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

from core.tables import render_table
from core.config import Settings, load_settings
from core.errors import InputError
from core.training.plan import RunPlan, plan_run
from core.training.run_config import RunConfig
from core.tokenizers.tokenizer import Tokenizer, load_tokenizer

Status = Literal["pass", "warn", "fail"]
STATUSES = ("pass", "warn", "fail")


@dataclass
class CheckResult:
    """One line of the doctor's report: which check, its status, what it found, how to fix it."""

    id: str
    status: Status
    message: str
    fix: str = ""

    def to_dict(self) -> dict[str, str]:
        """Return the result as `{"id", "status", "message", "fix"}`."""
        return {"id": self.id, "status": self.status, "message": self.message, "fix": self.fix}


@dataclass
class DoctorReport:
    """The outcome of all checks; `ok` is False when any check failed."""

    ok: bool
    checks: list[CheckResult]

    def to_dict(self) -> dict[str, Any]:
        """Return `{"ok": bool, "checks": [{"id", "status", "message", "fix"}, …]}`."""
        return {"ok": self.ok, "checks": [c.to_dict() for c in self.checks]}

    def failures(self) -> list[CheckResult]:
        """Return the failed checks."""
        return [c for c in self.checks if c.status == "fail"]

    def render(self) -> str:
        """Return the report as a table followed by the fixes of failed and warned checks."""
        table = render_table(["check", "status", "message"], [(c.id, c.status.upper(), c.message) for c in self.checks])
        fixes = [f"  {c.id}: {c.fix}" for c in self.checks if c.status != "pass" and c.fix]
        verdict = "doctor: all checks passed" if self.ok else f"doctor: {len(self.failures())} check(s) failed"
        return "\n".join([table, *(["", "fixes:", *fixes] if fixes else []), "", verdict])

    def raise_for_failures(self) -> None:
        """Return None when nothing failed; raise InputError listing every failure and its fix otherwise."""
        failures = self.failures()
        if failures:
            lines = "; ".join(f"{c.id}: {c.message}" + (f" Fix: {c.fix}" if c.fix else "") for c in failures)
            raise DoctorRefused(self, f"preflight doctor refused to start: {lines}")


class DoctorRefused(InputError):
    """The doctor found failures: the message lists them on one line; `detail` is the whole report
    (its table and fixes) for surfaces that show more than one line, such as a job's error."""

    def __init__(self, report: DoctorReport, message: str) -> None:
        super().__init__(message)
        self.report = report
        self.detail = f"doctor found problems:\n{report.render()}"


CheckFunction = Callable[["DoctorContext"], "CheckResult | list[CheckResult] | None"]
_REGISTRY: dict[str, tuple[int, CheckFunction]] = {}


def register_check(check_id: str, order: int) -> Callable[[CheckFunction], CheckFunction]:
    """Return a decorator that registers a check function under `check_id`, run by ascending `order`."""

    def decorate(func: CheckFunction) -> CheckFunction:
        _REGISTRY[check_id] = (order, func)
        return func

    return decorate


def discover_checks() -> list[tuple[str, CheckFunction]]:
    """Import every module of the `core.checks` package and return (id, function) in run order."""
    import core.checks as package

    for info in pkgutil.iter_modules(package.__path__):
        if not info.name.startswith("_") and info.name != "doctor":
            importlib.import_module(f"{package.__name__}.{info.name}")
    return [(cid, func) for cid, (_, func) in sorted(_REGISTRY.items(), key=lambda item: (item[1][0], item[0]))]


_UNSET = object()
CHECKPOINT_VERSIONS_KEPT = 1  # a published checkpoint is gigabytes: keep only the latest version loaded
_checkpoints: OrderedDict[tuple[str, int, int], Any] = OrderedDict()
_checkpoints_lock = threading.Lock()


def _file_version(path: Path) -> tuple[str, int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return str(path), stat.st_size, stat.st_mtime_ns


def load_checkpoint_once(path: str | os.PathLike[str]) -> Any:
    """Return the LoadedCheckpoint at `path`, loaded and hashed once per process per file version.

    A version is the resolved path, size and mtime_ns: a rewritten file loads again. The latest
    CHECKPOINT_VERSIONS_KEPT versions stay in memory. Raises InputError (from
    `core.checkpoint.load_checkpoint`) when the file does not load; a failure is not kept.
    """
    from core.checkpoint import load_checkpoint

    resolved = Path(path).resolve()
    version = _file_version(resolved)
    with _checkpoints_lock:
        if version is not None and version in _checkpoints:
            _checkpoints.move_to_end(version)
            return _checkpoints[version]
    loaded = load_checkpoint(path)
    if version is not None and _file_version(resolved) == version:  # unchanged while it was read
        with _checkpoints_lock:
            _checkpoints[version] = loaded
            while len(_checkpoints) > CHECKPOINT_VERSIONS_KEPT:
                _checkpoints.popitem(last=False)
    return loaded


@dataclass
class DoctorContext:
    """What the checks look at. Paths are absolute; the tokenizer and checkpoints load lazily, once,
    unless the caller `provide`s the objects it already loaded."""

    tokenizer_path: Path | None = None
    base_tokenizer_path: Path | None = None
    target_config_path: Path | None = None
    checkpoint_path: Path | None = None
    family: str | None = None
    freeze_until: int | None = None
    declared_vocab: int | None = None
    run_config: RunConfig | None = None
    config_path: Path | None = None
    cache_dir: Path | None = None
    resume_checkpoint: Path | None = None
    device: str | None = None
    #: a device size in bytes the memory plan must fit (`--device-memory`), instead of the device's free memory
    device_memory: int | None = None
    #: the processes the run trains on (torchrun's ranks; `doctor --nproc`): DDP's gradient buckets on each, beyond one
    ranks: int = 1
    extras: dict[str, Any] = field(default_factory=dict)
    settings: Settings | None = None
    #: loads the checkpoint at `resume_checkpoint` (default `core.checkpoint.load_checkpoint`; the trainer's plan shares its own)
    resume_loader: Callable[[Path], Any] | None = None
    _tokenizer: Any = field(default=_UNSET, init=False, repr=False)
    _tokenizer_source: str | None = field(default=None, init=False, repr=False)
    _checkpoint: Any = field(default=_UNSET, init=False, repr=False)
    _resume: Any = field(default=_UNSET, init=False, repr=False)

    def get_settings(self) -> Settings:
        """Return the settings in use (loaded from the defaults when none were given)."""
        if self.settings is None:
            self.settings = load_settings()
        return self.settings

    def _resolve_tokenizer(self) -> tuple[Path, str]:
        if self.tokenizer_path is not None:
            return Path(self.tokenizer_path), "explicit path"
        if self.run_config is not None and self.run_config.tokenizer:
            return self.get_settings().resolve(self.run_config.tokenizer), f"run config {self.config_path or ''}".strip()
        if self.checkpoint_path is not None:
            meta = self.checkpoint().meta or {}
            fingerprint = meta.get("tokenizer_fingerprint")
            if fingerprint:
                from core.tokenizers.vocab import find_tokenizer_by_fingerprint

                folder = self.get_settings().resolve("tokenizers")
                found = find_tokenizer_by_fingerprint(folder, fingerprint)
                if found is None:
                    raise InputError(
                        f"{self.checkpoint_path}: its metadata names tokenizer {fingerprint[:12]}…, but no file in "
                        f"{folder} has that fingerprint. Pass --tokenizer or copy the tokenizer into {folder}."
                    )
                return found, "checkpoint metadata"
        default = self.get_settings().get("tokenizer.default")
        if default:
            return self.get_settings().resolve(default), "workspace default (tokenizer.default)"
        raise InputError(
            "no tokenizer: none was passed, the run config names none, the checkpoint records none and "
            "`tokenizer.default` is unset. Pass --tokenizer PATH or set `tokenizer:` in the run config."
        )

    def tokenizer(self) -> Tokenizer:
        """Return the tokenizer resolved as explicit path → run config → checkpoint metadata → workspace default.

        Raises InputError (the same one on every call) when none resolves or it fails to load.
        """
        if self._tokenizer is _UNSET:
            try:
                path, source = self._resolve_tokenizer()
                self._tokenizer_source = source
                self._tokenizer = load_tokenizer(path)
            except InputError as exc:
                self._tokenizer = exc
        if isinstance(self._tokenizer, InputError):
            raise self._tokenizer
        return self._tokenizer

    def tokenizer_source(self) -> str | None:
        """Return where the tokenizer came from (after `tokenizer()` was called), or None."""
        return self._tokenizer_source

    def tokenizer_or_none(self) -> Tokenizer | None:
        """Return the tokenizer, or None when it does not resolve or load (check 1 reports why)."""
        try:
            return self.tokenizer()
        except InputError:
            return None

    def provide(self, tokenizer: Tokenizer | None = None, checkpoint: Any = None) -> None:
        """Hand the checks what the caller already loaded, so they neither load nor hash it again.

        `tokenizer` must be the one this context resolves to (the run config's, for the trainer),
        `checkpoint` the LoadedCheckpoint at `checkpoint_path`.
        Raises InputError when the tokenizer's source does not resolve.
        """
        if checkpoint is not None:
            self._checkpoint = checkpoint
        if tokenizer is not None:
            _, self._tokenizer_source = self._resolve_tokenizer()
            self._tokenizer = tokenizer

    def _load_once(self, attr: str, path: Path | None, load: Callable[[Path], Any]) -> Any:
        if path is None:
            return None
        if getattr(self, attr) is _UNSET:
            try:
                setattr(self, attr, load(path))
            except InputError as exc:
                setattr(self, attr, exc)
        loaded = getattr(self, attr)
        if isinstance(loaded, InputError):
            raise loaded
        return loaded

    def checkpoint(self) -> Any:
        """Return the LoadedCheckpoint at `checkpoint_path` (`load_checkpoint_once`), or None when no checkpoint is involved.

        Raises InputError (the same one on every call) when it fails to load.
        """
        return self._load_once("_checkpoint", self.checkpoint_path, load_checkpoint_once)

    def resume(self) -> Any:
        """Return the LoadedCheckpoint at `resume_checkpoint` (loaded once), or None when not resuming.

        Raises InputError (the same one on every call) when it fails to load.
        """
        from core.checkpoint import load_checkpoint

        # not `load_checkpoint_once`: the trainer loads its weights from it, so it is never shared across runs
        return self._load_once("_resume", self.resume_checkpoint, self.resume_loader or load_checkpoint)

    def checkpoint_or_none(self) -> Any:
        """Return the LoadedCheckpoint, or None when there is none or it fails to load."""
        try:
            return self.checkpoint()
        except InputError:
            return None


def doctor_context_from_plan(plan: RunPlan, device_memory: int | None = None) -> DoctorContext:
    """Return a DoctorContext for a run's plan (`core.training.plan.plan_run`), with what the trainer
    has loaded of it (`plan.loaded`: tokenizer, base checkpoint, resume checkpoint, device, model
    config, feature cache, ranks) handed to the checks so they load nothing again.

    `freeze.until: auto` leaves freeze_until None (the checks take the base size from the
    checkpoint metadata); `freeze.mode: none` disables the freeze check. A `model` entry
    `n_vocab`, `number_text_tokens`, `vocab_size` or `text_tokens_dict_size` becomes the declared
    vocab size. A foreign `family:` names the context's family; the plan's base checkpoint (the
    family's published one when the run names none) is the checkpoint, except when resuming.
    `device_memory` (bytes) is the device size the memory plan must fit (`--device-memory`).
    """
    config, loaded = plan.config, plan.loaded
    declared = None
    for key in ("n_vocab", "number_text_tokens", "vocab_size", "text_tokens_dict_size"):
        if isinstance(config.model.get(key), int):
            declared = config.model[key]
            break
    frozen = config.freeze.mode != "none"
    until = config.freeze.until if frozen and isinstance(config.freeze.until, int) else None
    ctx = DoctorContext(
        checkpoint_path=None if loaded.resume_path else plan.base_checkpoint,
        family=plan.family.name if plan.family.name != "linguaforge" else None,
        freeze_until=until,
        declared_vocab=declared,
        run_config=config,
        config_path=plan.config_path,
        cache_dir=loaded.cache_dir,
        resume_checkpoint=loaded.resume_path,
        device=loaded.device,
        device_memory=device_memory,
        ranks=loaded.ranks,
        settings=plan.settings,
        resume_loader=lambda _path: loaded.load_resume(),
    )
    if loaded.model_config is not None:
        ctx.extras.update({k: v for k, v in loaded.model_config.items() if k in ("max_text_tokens", "max_speech_tokens")},
                          model_config=loaded.model_config)
    ctx.provide(loaded.tokenizer, loaded.base)
    return ctx


def doctor_context_from_run_config(
    config: RunConfig, config_path: str | os.PathLike[str] | None, settings: Settings,
) -> DoctorContext:
    """Return a DoctorContext for a run config (its plan, nothing loaded yet); its relative paths
    resolve against the workspace. Raises InputError when the config cannot be planned (an unknown
    family, a model folder that is not a folder)."""
    return doctor_context_from_plan(plan_run(config, settings, config_path))


def doctor_preflight(plan: RunPlan, only: str | None = None, device_memory: int | None = None) -> DoctorReport:
    """Return the doctor's report on a run's plan (only the checks whose id starts with `only`, if given):
    the `Preflight` the trainer runs before preprocessing and on the built feature cache. `device_memory`
    (bytes, `train --device-memory`) caps the memory the run's plan may use."""
    return run_doctor(doctor_context_from_plan(plan, device_memory), only)


def _as_results(check_id: str, outcome: Any) -> list[CheckResult]:
    if outcome is None:
        return []
    results = outcome if isinstance(outcome, list) else [outcome]
    for result in results:
        if not isinstance(result, CheckResult) or result.status not in STATUSES:
            raise TypeError(f"check {check_id} returned {result!r}, not a CheckResult")
    return results


def run_doctor(ctx: DoctorContext, only: str | None = None) -> DoctorReport:
    """Return the report of every registered check run on `ctx` (only ids starting with `only`, if given).

    A check raising InputError becomes a `fail` with that message; other exceptions propagate
    (they are bugs in the check, not problems of the user's files).
    """
    results: list[CheckResult] = []
    for check_id, func in discover_checks():
        if only is not None and not check_id.startswith(only):
            continue
        try:
            results.extend(_as_results(check_id, func(ctx)))
        except InputError as exc:
            results.append(CheckResult(check_id, "fail", str(exc), "Fix the file or value named in the message."))
    return DoctorReport(ok=not any(r.status == "fail" for r in results), checks=results)

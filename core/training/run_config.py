"""The run configuration (`runs/<run>/config.yaml`, what `train --config` reads).

`load_run_config(path)` returns a validated `RunConfig`, `save_run_config(config, path)` writes one
(the form↔config mapping of the dashboard lives beside it in `run_form`). A config may start with
`preset: NAME` to inherit `config/presets/NAME.yaml`; its own keys override the preset.
Unknown keys and wrong types are InputErrors naming the key, so a typo never passes silently.

Every path a run config names (`config_paths`: tokenizer, base checkpoint, codec, data, eval
sentences and references) is held to the same roots as a job parameter — the workspace and the
settings' `data_roots` — and `model_dir` also to the settings' model folders
(`check_config_paths`); relative paths resolve against the workspace.
"""

from __future__ import annotations

import dataclasses
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from core.config import REPO_ROOT, Settings, load_settings, merge_dicts, read_yaml
from core.confine import check_name, is_name
from core.errors import InputError
from core.fsutil import atomic_write_text
from core.numbers import SEED, NumberRange

PRESETS_DIR = REPO_ROOT / "config" / "presets"
TASKS = ("tts", "lm")
FREEZE_MODES = ("base-rows", "none", "all-but-new-rows")
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
COMPILE_MODES = (True, False, "auto")
MAX_CPU_THREADS = 1024
BATCH_AUTO = "auto"
AUTO_EFFECTIVE = 16  # samples per step of `batch: {size: auto}` without `effective`
# How `best.pt` may be chosen: the metric and whether lower is better.
# `quality`: the quality report's score (core.eval.quality.report.quality_score), lower is better.
BEST_METRICS = {"val_loss": True, "eval_mcd": True, "eval_dtw_accuracy": False, "eval_sphinx_accuracy": False,
                "quality": True}
BEST_AUTO = "auto"  # the default: `quality` where periodic evaluation runs, else `val_loss` (best_metric_of)
EVAL_REFERENCES = ("dataset", "espeak")
ADAPTER_KINDS = ("none", "lora")
SPLIT_RULES = ("clip", "speaker")
# every number of a run config is finite and bounded (core.numbers); the keys with a narrower range check it below
CONFIG_FLOAT = NumberRange(-1e12, 1e12, words="a finite number of at most 1e12")
CONFIG_INT = NumberRange(-(2**53), 2**53, integer=True, words="a whole number of at most 2**53")


@dataclass
class ReplayConfig:
    """Base-language replay: `share` of every training batch drawn from the clips of `manifest`."""

    manifest: str | None = None
    share: float = 0.25


@dataclass
class DataConfig:
    """Training data: a manifest (tts) or text corpus files (lm).

    `prefetch`: batches prepared ahead in a background thread (0 = in the training thread).
    `split`: `clip` (each clip by a hash of its id) or `speaker` (whole speakers held out for
    validation and evaluation, `val_ratio` of the clips; tts runs).
    """

    manifest: str | None = None
    corpus: list[str] = field(default_factory=list)
    val_ratio: float = 0.05
    split: str = "clip"
    prompts_per_target: int = 1
    prefetch: int = 4
    replay: ReplayConfig = field(default_factory=ReplayConfig)


@dataclass
class FreezeConfig:
    """Which text rows stay fixed. `until` is `auto` (base size from checkpoint metadata) or an int."""

    mode: str = "base-rows"
    until: int | str = "auto"


@dataclass
class AdapterConfig:
    """A LoRA adapter trained through peft instead of the full backbone (`kind: none` = no adapter).

    `targets`: module names (or name suffixes, as peft matches them) that get LoRA; empty = the
    family's default attention and MLP projections. The text rows train in full either way.
    """

    kind: str = "none"
    rank: int = 16
    alpha: float = 32.0
    dropout: float = 0.0
    targets: list[str] = field(default_factory=list)


@dataclass
class OptimConfig:
    """AdamW and learning-rate schedule settings."""

    lr: float = 5.0e-4
    weight_decay: float = 0.1
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    warmup_steps: int = 100
    new_row_warmup_steps: int = 50
    schedule: str = "cosine"
    min_lr_ratio: float = 0.1
    grad_clip: float = 1.0


@dataclass
class LossConfig:
    """Loss weights of the TTS objective."""

    text_weight: float = 0.2
    mel_weight: float = 0.8


@dataclass
class BatchConfig:
    """Batch size and gradient accumulation. `size: auto` takes the largest micro-batch the memory plan fits
    on the device (`core.training.auto_batch`) and reaches `effective` samples per step by accumulation."""

    size: int | str = 16
    accumulate: int = 1
    effective: int | None = None  # size: auto only: samples per optimiser step (default `AUTO_EFFECTIVE`)

    @property
    def auto(self) -> bool:
        """Return whether the micro-batch is chosen from the memory plan (`size: auto`)."""
        return self.size == BATCH_AUTO


@dataclass
class ScheduleConfig:
    """Step counts and intervals."""

    max_steps: int = 2000
    val_every: int = 200
    save_every: int = 200
    keep_last: int = 3
    eval_every: int = 0
    log_every: int = 10
    best_metric: str = "auto"  # auto: `quality` for a tts run with eval_every > 0, else `val_loss` (best_metric_of)


@dataclass
class EvalConfig:
    """The fixed evaluation set of periodic evaluation (`schedule.eval_every`, TTS runs), chosen once per
    run at its first evaluation and kept in the run folder's `eval_set.json` (core.training.eval_set).

    `count` new-language sentences (`language`, else the val split's most common language other
    than `base_language`) and `base_count` base-language sentences (`base_language`; 0 = none),
    from the run's own val split (`data.split: speaker` = held-out speakers), in the order of a hash
    of the clip id; or the first `count` of `sentences`, a text file (one sentence per line) or a
    manifest.jsonl, as the new-language set. Fewer clips than asked: the set takes what there is and
    says so. `references`: `dataset` (the manifest's clips), `espeak`, or a folder of `<n>.wav` clips.
    `synthesis` (model-family runs only): options of the family's speaker — chatterbox
    `temperature`, `cfg_weight`, `exaggeration`, `cfm_steps`; indextts `temperature`,
    `diffusion_steps` — and `max_seconds`, a cap on each sentence's speech (default: 2 × its
    reference + 1 s).
    `asr`: the ASR hook giving CER (`pocketsphinx`, `python:<module>:<function>`, `command:<line with {wav}>`);
    `mos`: compute the DNSMOS estimate; `base_language`: the language whose val samples give
    `val_base_loss`; `base_loss_warn`: the rise of `val_base_loss` since step 0 (a share) that warns.
    """

    sentences: str | None = None
    count: int = 20
    base_count: int = 10
    references: str = "dataset"
    wer: bool = False
    language: str | None = None
    synthesis: dict[str, Any] = field(default_factory=dict)
    asr: str | None = None
    mos: bool = True
    base_language: str = "en"
    base_loss_warn: float = 0.1


@dataclass
class RunConfig:
    """A whole run configuration: one field per top-level key of a run config YAML (unknown keys are refused)."""

    name: str = "run"
    task: str = "tts"
    family: str = "linguaforge"
    model_dir: str | None = None
    tokenizer: str | None = None
    base_checkpoint: str | None = None
    codec: str | None = None
    data: DataConfig = field(default_factory=DataConfig)
    model: dict[str, Any] = field(default_factory=lambda: {"preset": "tiny"})
    freeze: FreezeConfig = field(default_factory=FreezeConfig)
    adapter: AdapterConfig = field(default_factory=AdapterConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    batch: BatchConfig = field(default_factory=BatchConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    precision: str = "auto"
    compile: bool | str = "auto"  # regional torch.compile of the blocks: auto = on CUDA where measured faster (core.training.compile), off on the CPU
    activation_checkpointing: bool = False
    cpu_threads: int | str = "auto"  # torch's intra-op threads on the CPU: auto = torch's own choice (one per core)
    seed: int = 0
    source: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the config as plain data (what is written to `runs/<run>/config.yaml`)."""
        data = dataclasses.asdict(self)
        data.pop("source", None)
        if data["batch"]["effective"] is None:  # only `size: auto` reads it
            del data["batch"]["effective"]
        return data


def _check_type(value: Any, annotation: Any, where: str) -> Any:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is Any:
        return value
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        for option in args:
            try:
                return _check_type(value, option, where)
            except InputError:
                continue
        names = " or ".join(getattr(a, "__name__", str(a)) for a in args)
        raise InputError(f"{where}: expected {names}, got {value!r}.")
    if annotation is type(None):
        if value is None:
            return None
        raise InputError(f"{where}: expected nothing (null), got {value!r}.")
    if origin is list:
        if not isinstance(value, list):
            raise InputError(f"{where}: expected a list, got {value!r}.")
        return [_check_type(v, args[0], f"{where}[{i}]") for i, v in enumerate(value)] if args else value
    if origin is dict:
        if not isinstance(value, dict):
            raise InputError(f"{where}: expected a mapping, got {value!r}.")
        return value
    if dataclasses.is_dataclass(annotation):
        if not isinstance(value, dict):
            raise InputError(f"{where}: expected a mapping, got {value!r}.")
        return _build(annotation, value, where)
    if annotation is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return CONFIG_FLOAT.check(value, where)  # finite: a NaN learning rate is no number
    if annotation is int and isinstance(value, int) and not isinstance(value, bool):
        return CONFIG_INT.check(value, where)
    if annotation is str and isinstance(value, str):
        return value
    if annotation is bool and isinstance(value, bool):
        return value
    name = getattr(annotation, "__name__", str(annotation))
    raise InputError(f"{where}: expected {name}, got {value!r}.")


def _build(cls: type, data: dict[str, Any], where: str) -> Any:
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise InputError(
            f"{where}: unknown key(s) {', '.join(unknown)}; allowed keys are {', '.join(sorted(names))}."
        )
    kwargs = {key: _check_type(value, hints[key], f"{where}.{key}") for key, value in data.items()}
    return cls(**kwargs)


def check_cpu_threads(threads: Any, where: str) -> None:
    """Raise InputError naming `where` unless `threads` is `auto` or a whole number from 1 to MAX_CPU_THREADS."""
    if threads != "auto" and (not isinstance(threads, int) or isinstance(threads, bool)
                              or not 1 <= threads <= MAX_CPU_THREADS):
        raise InputError(f"{where}: {threads!r}: give `auto` (one thread per core) or a whole number from 1 to "
                         f"{MAX_CPU_THREADS}; the quick preset's tiny model trains faster on 1 than on 2 (docs/benchmarks.md, "
                         "\"One thread per training\").")


def _validate(config: RunConfig, where: str) -> None:
    check_name(config.name, f"{where}.name")
    if config.task not in TASKS:
        raise InputError(f"{where}.task: {config.task!r} is not one of {', '.join(TASKS)}.")
    from core.families.registry import model_family_names

    if config.family not in model_family_names():
        raise InputError(f"{where}.family: {config.family!r} is not one of {', '.join(model_family_names())}.")
    if config.family != "linguaforge" and config.task != "tts":
        raise InputError(f"{where}.task: family {config.family} trains task tts only, not {config.task!r}.")
    if config.freeze.mode not in FREEZE_MODES:
        raise InputError(f"{where}.freeze.mode: {config.freeze.mode!r} is not one of {', '.join(FREEZE_MODES)}.")
    until = config.freeze.until
    if isinstance(until, str) and until != "auto":
        raise InputError(f"{where}.freeze.until: {until!r} must be `auto` or a row index.")
    if isinstance(until, int) and until < 0:
        raise InputError(f"{where}.freeze.until: {until} is negative; use a row index ≥ 0 or `auto`.")
    if config.precision not in PRECISIONS:
        raise InputError(f"{where}.precision: {config.precision!r} is not one of {', '.join(PRECISIONS)}.")
    if config.compile not in COMPILE_MODES:
        raise InputError(f"{where}.compile: {config.compile!r} must be true, false or auto.")
    check_cpu_threads(config.cpu_threads, f"{where}.cpu_threads")
    if config.data.prefetch < 0:
        raise InputError(f"{where}.data.prefetch: {config.data.prefetch} must be 0 (no background thread) or positive.")
    if not 0.0 <= config.data.val_ratio < 1.0:
        raise InputError(f"{where}.data.val_ratio: {config.data.val_ratio} must be in [0, 1).")
    _validate_batch(config.batch, where)
    positives = {
        "batch.accumulate": config.batch.accumulate,
        "schedule.max_steps": config.schedule.max_steps,
        "schedule.val_every": config.schedule.val_every,
        "schedule.save_every": config.schedule.save_every,
        "schedule.keep_last": config.schedule.keep_last,
        "schedule.log_every": config.schedule.log_every,
    }
    for key, value in positives.items():
        if value <= 0:
            raise InputError(f"{where}.{key}: {value} must be a positive integer.")
    SEED.check(config.seed, f"{where}.seed")
    if config.optim.lr <= 0:
        raise InputError(f"{where}.optim.lr: {config.optim.lr} must be positive.")
    if config.schedule.eval_every < 0:
        raise InputError(f"{where}.schedule.eval_every: {config.schedule.eval_every} must be 0 (off) or positive.")
    best = config.schedule.best_metric
    if best != BEST_AUTO and best not in BEST_METRICS:
        raise InputError(f"{where}.schedule.best_metric: {best!r} is not one of {', '.join((BEST_AUTO, *BEST_METRICS))}.")
    if best not in (BEST_AUTO, "val_loss") and (config.schedule.eval_every == 0 or config.task != "tts"):
        raise InputError(f"{where}.schedule.best_metric: {best} needs a tts run with schedule.eval_every > 0.")
    if config.eval.synthesis and config.family == "linguaforge":
        raise InputError(f"{where}.eval.synthesis: applies to model-family runs (family: chatterbox | indextts); "
                         "LinguaForge's own models speak with their defaults. Remove it.")
    _validate_adapter(config, where)
    if config.data.split not in SPLIT_RULES:
        raise InputError(f"{where}.data.split: {config.data.split!r} is not one of {', '.join(SPLIT_RULES)}.")
    if config.data.split == "speaker" and config.task != "tts":
        raise InputError(f"{where}.data.split: speaker holds out whole speakers of a tts manifest; use clip for task {config.task}.")
    replay = config.data.replay
    if replay.manifest is not None and not 0.0 < replay.share < 1.0:
        raise InputError(f"{where}.data.replay.share: {replay.share} must be between 0 and 1 (a share of each batch).")
    if replay.manifest is not None and config.task != "tts":
        raise InputError(f"{where}.data.replay: replays base-language clips in tts runs; remove it for task {config.task}.")
    if config.eval.base_loss_warn <= 0:
        raise InputError(f"{where}.eval.base_loss_warn: {config.eval.base_loss_warn} must be a positive share (0.1 = 10%).")
    if config.eval.count < 2:
        raise InputError(f"{where}.eval.count: {config.eval.count}; evaluation needs at least 2 sentences.")
    if config.eval.base_count < 0:
        raise InputError(f"{where}.eval.base_count: {config.eval.base_count}; use 0 (no base-language set) or more.")


def _validate_batch(batch: BatchConfig, where: str) -> None:
    if isinstance(batch.size, str) and batch.size != BATCH_AUTO:
        raise InputError(f"{where}.batch.size: {batch.size!r} must be a positive integer or `auto` (the largest that fits).")
    if isinstance(batch.size, int) and batch.size <= 0:
        raise InputError(f"{where}.batch.size: {batch.size} must be a positive integer or `auto` (the largest that fits).")
    if batch.effective is not None and not batch.auto:
        raise InputError(f"{where}.batch.effective: applies to batch.size auto; with batch.size {batch.size} "
                         f"the step takes size × accumulate samples. Remove it or set batch.size: auto.")
    if batch.auto and batch.accumulate != 1:
        raise InputError(f"{where}.batch.accumulate: {batch.accumulate} is chosen by batch.size auto; set "
                         f"batch.effective (samples per step) instead.")
    if batch.effective is not None and batch.effective <= 0:
        raise InputError(f"{where}.batch.effective: {batch.effective} must be a positive integer (samples per step).")


def best_metric_of(config: RunConfig) -> str:
    """Return the metric `best.pt` follows: `schedule.best_metric`, or for `auto` the quality score
    (`quality`) in a tts run with `schedule.eval_every > 0` and `val_loss` where no evaluation runs."""
    best = config.schedule.best_metric
    if best != BEST_AUTO:
        return best
    return "quality" if config.task == "tts" and config.schedule.eval_every > 0 else "val_loss"


def _validate_adapter(config: RunConfig, where: str) -> None:
    adapter = config.adapter
    if adapter.kind not in ADAPTER_KINDS:
        raise InputError(f"{where}.adapter.kind: {adapter.kind!r} is not one of {', '.join(ADAPTER_KINDS)}.")
    if adapter.kind == "none":
        return
    if adapter.rank <= 0:
        raise InputError(f"{where}.adapter.rank: {adapter.rank} must be a positive integer (8–64 is usual).")
    if adapter.alpha <= 0:
        raise InputError(f"{where}.adapter.alpha: {adapter.alpha} must be positive (often 2 × rank).")
    if not 0.0 <= adapter.dropout < 1.0:
        raise InputError(f"{where}.adapter.dropout: {adapter.dropout} must be in [0, 1).")
    if any(not target.strip() for target in adapter.targets):
        raise InputError(f"{where}.adapter.targets: {adapter.targets!r} holds an empty name; list module names such as q_proj.")
    if config.freeze.mode == "all-but-new-rows":
        raise InputError(f"{where}.freeze.mode: all-but-new-rows trains no adapter; use base-rows (or none) with adapter.kind lora.")
    if config.schedule.eval_every:
        raise InputError(f"{where}.schedule.eval_every: periodic evaluation speaks from full checkpoints; with an adapter set it "
                         "to 0 and evaluate `export --merge` output with `eval tts`.")


def preset_path(name: str) -> Path:
    """Return the file of the preset `name` in config/presets/; raises InputError listing the presets when
    `name` is not one of them (a path such as `../x` included)."""
    path = PRESETS_DIR / f"{name}.yaml"
    if not is_name(name) or not path.is_file():
        known = sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))
        raise InputError(f"preset {name!r} does not exist; known presets: {', '.join(known) or 'none'}.")
    return path


def resolve_preset_chain(data: dict[str, Any], seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """Return `data` merged over the preset it names (recursively), without the `preset` key.

    Raises InputError on an unknown preset or a preset cycle.
    """
    name = data.get("preset")
    body = {k: v for k, v in data.items() if k != "preset"}
    if name is None:
        return body
    if name in seen:
        raise InputError(f"preset cycle: {' -> '.join((*seen, name))}.")
    base = resolve_preset_chain(read_yaml(preset_path(name)), (*seen, name))
    return merge_dicts(base, body)


def run_config_from_dict(data: dict[str, Any], source: str = "config") -> RunConfig:
    """Return a validated RunConfig from a mapping (presets resolved).

    Raises InputError naming the key at fault.
    """
    config = _build(RunConfig, resolve_preset_chain(data), source)
    config.source = source
    _validate(config, source)
    return config


def config_paths(config: RunConfig) -> list[tuple[str, str]]:
    """Return (key, value) for every file or folder the run config names, model folder excepted:
    tokenizer, base_checkpoint, codec, data.manifest, data.corpus[i], eval.sentences and
    eval.references (unless it is `dataset` or `espeak`). Unset keys are left out."""
    named = [("tokenizer", config.tokenizer), ("base_checkpoint", config.base_checkpoint), ("codec", config.codec),
             ("data.manifest", config.data.manifest), ("data.replay.manifest", config.data.replay.manifest)]
    named += [(f"data.corpus[{i}]", corpus) for i, corpus in enumerate(config.data.corpus)]
    named.append(("eval.sentences", config.eval.sentences))
    if config.eval.references not in EVAL_REFERENCES:
        named.append(("eval.references", config.eval.references))
    return [(key, value) for key, value in named if value]


def check_config_paths(config: RunConfig, settings: Settings) -> None:
    """Check that every path of `config` lies inside the workspace or a data root of `settings`, its
    `model_dir` there or inside a model folder the settings name (`families.<family>.model_dir`), and
    that its `eval.asr` names a hook the settings declare (code and programs run only from there).

    Raises InputError naming the key (as `<source>.<key>`), the resolved path and the allowed folders,
    or the undeclared hook.
    """
    if config.eval.asr:
        from core.eval.quality.asr_hook import hook_spec

        try:
            hook_spec(config.eval.asr, settings.get("eval.asr_hooks"))
        except InputError as exc:
            raise InputError(f"{config.source}.{exc}") from None
    checked = [(key, value, False) for key, value in config_paths(config)]
    if config.model_dir and not config.model_dir.startswith("hf:"):  # a Hub id: `models pull` fills a workspace folder
        checked.append(("model_dir", config.model_dir, True))
    elif config.model_dir:
        from core.families.releases import parse_hf_id

        try:
            parse_hf_id(config.model_dir)
        except InputError as exc:
            raise InputError(f"{config.source}.model_dir: {exc}") from None
    for key, value, model_folder in checked:
        try:
            settings.check_inside_roots(value, model_folders=model_folder)
        except InputError as exc:
            raise InputError(f"{config.source}.{key}: {exc}") from None


def load_run_config(path: str | os.PathLike[str], settings: Settings | None = None) -> RunConfig:
    """Return the validated RunConfig stored in the YAML file `path`, its paths checked against the roots
    of `settings` (default: `load_settings()`, what every entry point loads).

    Raises InputError when the file is missing, malformed, names an unknown key or a bad value, or
    names a path outside the allowed folders (`check_config_paths`).
    """
    config = run_config_from_dict(read_yaml(Path(path)), str(path))
    check_config_paths(config, settings or load_settings())
    return config


def save_run_config(config: RunConfig, path: str | os.PathLike[str]) -> Path:
    """Write `config` as YAML (every key, presets resolved) atomically to `path`; return the path."""
    target = Path(path)
    atomic_write_text(target, yaml.safe_dump(config.to_dict(), sort_keys=False, allow_unicode=True))
    return target

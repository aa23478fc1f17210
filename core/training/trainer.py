"""The trainer: one run of the LM or TTS task, from its plan (`core.training.plan.plan_run`).

Order is fixed: plan the run → resolve the tokenizer → size the model from it → the preflight
(the doctor, handed in by whoever runs the trainer: `core.recipe`; it must pass) → build the data
→ train. The run folder `runs/<name>/` receives config.yaml, metrics.jsonl, tb/, checkpoints/
(step_*.pt, best.pt), log.txt and status.json. With `schedule.eval_every: N`
(tts) every N-th regular checkpoint, and the last one, is evaluated on the run's fixed evaluation set
(`core.training.eval_set`: `eval_set.json`, new and base language) by `core.training.evaluation`,
which also chooses `best.pt` (the quality score by default, `schedule.best_metric`):
`checkpoints/eval.json`, `eval_audio/` and a `split: eval` metrics line. A failed eval is logged only.
Touching `runs/<name>/STOP` or sending SIGTERM makes the trainer finish the step, save and exit with state `stopped`.
Nothing a run made is lost: a folder that holds checkpoints is trained further only with `resume`
(else the start is refused, naming `--resume auto` and `--fresh`), `fresh` moves it aside first
(`runs/<name>.old-<time>`), and a start refused during set-up leaves the folder of a run with
checkpoints as it was (a folder without any records why the start failed in status.json). At the start, temporary files of saves a kill interrupted are removed and metrics.jsonl keeps
only the steps up to the resumed one (later ones run again).
Under `torchrun` (WORLD_SIZE > 1) the model is wrapped in DDP (gloo on CPU, nccl on CUDA) and the
family's forward is handed the wrapper, so every gradient is averaged over the ranks; each rank
takes its share of every global batch (`core.training.data.Batcher`) and the losses and metrics are
reduced so that W ranks of `batch.size` B compute what one process computes with W × B
(`core.training.reduction`); validation shares its batches out too. Only rank 0 writes files and
evaluates; the ranks agree on STOP/SIGTERM at logging steps; at the end every rank's weights'
sha256 goes into status.json (`rank_weights_sha256`), and the ranks leave the process group
together. A run stopped under W ranks resumes under any other number (`Batcher.load_state_dict`).

The step never waits for the host: batches come from a `Prefetcher` (background thread, pinned
memory, non-blocking copies), metrics are summed on the device (`MetricWindow`) and read at
`schedule.log_every`, the frozen-row checksum runs at start, at each checkpoint and at the end.
On CUDA: TF32 matmuls for fp32, fused AdamW, and regional `torch.compile` of the repeated transformer
block (`compile: auto|true|false`, `core.training.compile`; the first step's time, compilation included,
is logged and recorded as `compile_seconds`) with a fallback to eager that logs why when compilation fails.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import datetime
import hashlib
import os
import sys
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from core.checkpoint import CheckpointMeta, remove_orphaned_saves, save_checkpoint
from core.config import Settings, load_settings
from core.training.embeddings import extend_state_dict, init_record
from core.errors import InputError
from core.families import rows_for
from core.families.contract import SampleSet, TaskData
from core.processes import is_alive
from core.runs import RUNS_DIR, run_folder_of_config
from core.training.auto_batch import BatchChoice, Lengths, StepPlanner, cache_lengths, choose_batch, device_budget
from core.training.run_config import AUTO_EFFECTIVE, BatchConfig, RunConfig, save_run_config
from core.tokenizers.tokenizer import Tokenizer, load_tokenizer
from core.training.data import Batcher, Prefetcher, ReplayBatcher, eval_batches, joined_samples, replay_count, to_device
from core.training.freeze import frozen_row_count, require_unchanged
from core.training.log import RunLog
from core.training.plan import Preflight, RunPlan, plan_run
from core.training.optim import RowWarmup, build_optimizer, build_scheduler
from core.training.evaluation import RunEvaluation
from core.training.reduction import ScoredSums, step_loss
from core.training.state import (
    check_resume_source,
    remap_optimizer_state,
    resolve_resume,
    restore_rng,
    resume_plan,
    rng_state,
    rotate,
)
from core.training.compile import compile_blocks, compile_by_default, uncompile_blocks
from core.training.window import MetricWindow
from core.training.adapter import trained_tensors

GROWTH_INIT = "fvt"
STATUS_INTERVAL_S = 1.0  # status.json step is refreshed at least this often, whatever log_every is
COMPILE_BACKEND: Any = "inductor"  # torch.compile backend (tests swap in a failing one to check the fallback)
# how long a rank waits at a collective: the other ranks wait at the next step while rank 0 evaluates a checkpoint
COLLECTIVE_TIMEOUT = datetime.timedelta(hours=2)


@dataclass
class TrainResult:
    """What a run ended with."""

    state: str
    step: int
    run_dir: Path
    last_checkpoint: str | None
    best_val_loss: float | None
    base_rows_sha256: dict[str, str | None]
    val: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Return the result as JSON-ready data."""
        return {
            "state": self.state,
            "step": self.step,
            "run_dir": str(self.run_dir),
            "last_checkpoint": self.last_checkpoint,
            "best_val_loss": self.best_val_loss,
            "base_rows_sha256": self.base_rows_sha256,
            "val": self.val,
            **self.info,
        }


_ranks_ended_together = False  # true while the process's last run reached its end on every rank


def _distributed() -> tuple[int, int]:
    """Return (rank, world size), joining the process group under torchrun (destroyed at the process's exit,
    as PyTorch asks of a program that ends normally)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=COLLECTIVE_TIMEOUT)
        atexit.register(_leave_process_group)
    return (dist.get_rank(), world) if world > 1 else (0, 1)


def data_parallel(model: nn.Module, device: torch.device) -> nn.parallel.DistributedDataParallel:
    """Return `model` wrapped in DistributedDataParallel as every run under several ranks trains it (the process
    group joined: `_distributed`).

    The gradients are views into DDP's flat buckets (`gradient_as_bucket_view`): one gradient per trainable
    weight on each rank, not a second copy beside the buckets — what the memory plan counts
    (`core.training.memory`: `DDP gradient buckets`). Frozen parameters get no bucket. Buffers are not re-sent
    every step: the frozen text rows are buffers (hundreds of MB at full size), identical on every rank from
    the start; a buffer a training forward updates is reduced over the ranks by the model itself
    (GPTTTS.speech_rate). Every trainable parameter gets a gradient at every step (families freeze what the
    cached features leave unused: `unused_in_training`), so DDP needs no search for unused parameters.
    """
    return nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None,
                                               broadcast_buffers=False, gradient_as_bucket_view=True)


def _leave_process_group() -> None:
    """Destroy the process group at exit. After a run every rank finished, the ranks first meet at a barrier:
    ranks that tear gloo down at different moments can abort ("terminate called without an active
    exception"). After a failure there is no collective: the failed rank exits at once, so torchrun stops the rest."""
    if dist.is_initialized():
        if _ranks_ended_together:
            dist.barrier()
        dist.destroy_process_group()


def _device(rank: int) -> torch.device:
    if torch.cuda.is_available():
        index = int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")


def _autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    if precision == "auto":
        return torch.bfloat16 if device.type == "cuda" else None
    if precision == "fp16" and device.type != "cuda":
        raise InputError("precision fp16 needs a CUDA device; use fp32 or bf16 on a CPU.")
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def weights_sha256(model: nn.Module) -> str:
    """Return the sha256 over every tensor of the model's state dict, in key order."""
    digest = hashlib.sha256()
    for key, tensor in sorted(model.state_dict().items()):
        digest.update(key.encode())
        digest.update(tensor.detach().float().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


class Trainer:
    """One training run; construct it (plan, setup, preflight, data, resume) and call `run()`.

    `preflight` checks the run's plan before any preprocessing, and the feature cache once it is
    built (`core.recipe` passes the doctor); without one the run is not checked.
    """

    def __init__(
        self,
        config: RunConfig,
        config_path: str | os.PathLike[str] | None = None,
        settings: Settings | None = None,
        resume: str | None = None,
        max_steps: int | None = None,
        reset_optimizer: bool = False,
        fresh: bool = False,
        preflight: Preflight | None = None,
        device_memory: int | None = None,
    ) -> None:
        self.config = config
        self.device_memory = device_memory  # bytes `batch.size: auto` plans for, instead of the device's free memory
        self.preflight = preflight
        self.settings = settings or load_settings()
        self.rank, self.world = _distributed()
        self.device = _device(self.rank)
        if self.device.type == "cpu" and config.cpu_threads != "auto":
            torch.set_num_threads(int(config.cpu_threads))  # for the process: a job, a rank, a CLI call (inline stages restore it)
        self.amp_dtype = _autocast_dtype(config.precision, self.device)
        self.folder = run_folder_of_config(self.settings, config)
        self.run_dir = self.folder.path
        self.fresh = fresh
        self.stop_at = max_steps or config.schedule.max_steps
        self.log = RunLog(self.run_dir, enabled=self.rank == 0)
        self.config_path = Path(config_path).resolve() if config_path else None
        self._stop_requested = False
        self.window = MetricWindow()
        if self.device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = True  # fp32 runs use TF32 tensor cores
            torch.backends.cudnn.allow_tf32 = True

        try:
            self._check_start(resume)
            self._setup(config_path, resume, reset_optimizer)
            self._speed_setup()
        except BaseException as exc:
            if not self.folder.saved_checkpoints():  # a trained run's folder stays as it was: a refused start changes nothing
                self._record_failure(exc)
            self.log.close()
            raise

    def _check_start(self, resume: str | None) -> None:
        """Refuse, before any work, a start that would overwrite a run: a folder with checkpoints and
        neither `resume` nor `fresh`, both at once, or `fresh` while the run is training."""
        folder, shown = self.folder, f"{RUNS_DIR}/{self.folder.name}"
        if resume is not None and self.fresh:
            raise InputError("--fresh and --resume: pass one; --fresh starts over, --resume continues a run.")
        saved = folder.saved_checkpoints()
        if resume is None and not self.fresh and saved:
            names = ", ".join(p.name for p in saved[-3:])
            raise InputError(
                f"{shown} already holds a run with checkpoints ({names}); nothing was changed. Continue it with "
                f"--resume auto, or start over with --fresh (moves the old run to {shown}.old-<time>)."
            )
        status = folder.status()
        pid = status.get("pid")
        if self.fresh and status.get("state") == "running" and pid != os.getpid() and is_alive(pid, None):
            raise InputError(f"--fresh: run {folder.name} is training now (pid {status['pid']}); stop it first.")

    def _record_failure(self, exc: BaseException) -> None:
        """Record `exc` in status.json as the run's failure; a full disk must not hide the error itself."""
        with contextlib.suppress(OSError):
            self.log.update_status(state="failed", error=str(exc))

    def _run_preflight(self, only: str | None = None) -> None:
        if self.preflight is None:
            return
        report = self.preflight(self.plan, only)
        self.log.line("doctor:\n" + report.render())
        report.raise_for_failures()

    def _setup(self, config_path: str | os.PathLike[str] | None, resume: str | None, reset_optimizer: bool) -> None:
        config = self.config
        # 1. the plan: family, model folder, base checkpoint, tokenizer file
        if not config.tokenizer:
            raise InputError(f"{config.source}: `tokenizer` is not set; name the tokenizer file the model is sized from.")
        self.plan: RunPlan = plan_run(config, self.settings, config_path)
        self.family = self.plan.family
        loaded = self.plan.loaded
        # 2. tokenizer, model size from it (through the run's model family)
        try:
            self.tokenizer: Tokenizer = load_tokenizer(self.plan.tokenizer_path)
            loaded.tokenizer = self.tokenizer
            base_path = self.plan.base_checkpoint
            self.base = self.family.load_state_dict(base_path) if base_path else None
            loaded.base = self.base
            self.family_run = self.plan.family_run(self.tokenizer, self.base)
            self.codec = self.family_run.codec = self.family.load_codec(self.family_run)
            self.model_cfg = self.family.model_config(self.family_run)
            self.base_size = self.family.base_size(self.base)
            self.frozen_rows = frozen_row_count(config.freeze, self.base_size, self.tokenizer.size)
        except InputError:  # when the preflight sees the problem, its report (with the fixes) is the error
            if self.preflight is not None:
                report = self.preflight(self.plan, None)
                if not report.ok:
                    self.log.line("doctor:\n" + report.render())
                    report.raise_for_failures()
            raise
        base_meta = (self.base.meta or {}) if self.base else {}

        # 3. preflight before any preprocessing; then its cache checks on the preprocessing cache (tts)
        self.skipped_checkpoints: list[str] = []
        resume_path = resolve_resume(self.run_dir, resume, self.settings, self.skipped_checkpoints)
        for skipped in self.skipped_checkpoints:
            sys.stderr.write(f"warning: --resume auto skipped {skipped}; resuming from the newest loadable one\n")
        loaded.resume_path = resume_path  # a resume loads its own weights (the doctor's resume.tokenizer checks them)
        loaded.device = str(self.device)
        loaded.model_config = self.model_cfg.to_dict()
        loaded.ranks = self.world
        self._run_preflight()
        cache_dir = self._prepare_cache()
        self.length_bounds: list[float] | None = None
        if cache_dir is not None:
            loaded.cache_dir = cache_dir
            self._run_preflight(only="cache.")
            self.length_bounds = training_length_bounds(cache_dir)

        # 4. data, and the micro-batch (`batch.size: auto`: the largest the memory plan fits)
        self.data: TaskData = self.family.task_data(self.family_run, self.model_cfg, cache_dir)
        self.batch_choice: BatchChoice | None = None
        self.batch = config.batch
        if config.batch.auto:
            self.batch_choice = self._choose_batch(cache_dir)
            self.batch = BatchConfig(self.batch_choice.size, self.batch_choice.accumulate)
            self.log.line(self.batch_choice.describe())
        self.replay: dict[str, Any] | None = None
        self.replay_val: SampleSet | None = None
        if config.data.replay.manifest:
            self._add_replay()
        else:
            self.batcher = Batcher(self.data.train.lengths, self.batch.size, config.seed, self.rank, self.world)

        # 5. model, optimiser, state
        torch.manual_seed(config.seed)
        self.resumed_from: str | None = None
        self.grown_rows: dict[str, int] = {}
        self.step = 0
        self.evaluation = RunEvaluation(config, self.folder, self.settings, self.log, self.family_run.model_dir,
                                        self.validate_base)
        self.parent = self.base.sha256 if self.base else None
        self.init = base_meta.get("init") if self.base else "trained"
        self.init_rows = base_meta.get("init_rows") if self.base else None
        from core.hub import read_release_record

        self.release = read_release_record(self.family_run.model_dir) or base_meta.get("release")
        resume_loaded = loaded.load_resume()  # loaded once, by the doctor's resume check or here
        if resume_loaded is not None:
            check_resume_source(resume_loaded, self.family.name, config.task)
            self.frozen_rows = int(resume_loaded.extra.get("frozen_rows", self.frozen_rows))
            self.base_size = resume_loaded.extra.get("base_size", self.base_size)
        self.model = self.family.build_model(self.model_cfg, self.frozen_rows).to(self.device)
        self.adapter: dict[str, Any] | None = None
        if config.adapter.kind != "none":
            self._setup_adapter(resume_loaded)
        else:
            if self.base is not None and resume_loaded is None:
                self._load_weights(self.base.state_dict, str(self.base.path))
            self.family.apply_freeze(self.model, config.freeze.mode)
        self.optimizer, self.param_names = build_optimizer(self.model, config.optim)
        self.scheduler = build_scheduler(self.optimizer, config.optim, config.schedule.max_steps)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp_dtype == torch.float16)
        self.row_warmup = RowWarmup({}, {}, config.optim.new_row_warmup_steps)
        self.base_sha_start = self.base_rows_sha256()
        if resume_loaded is not None:
            self._resume(resume_loaded, reset_optimizer)
        self.ddp = data_parallel(self.model, self.device) if self.world > 1 else None

    # -- setup helpers ---------------------------------------------------------------------
    def _choose_batch(self, cache_dir: Path | None) -> BatchChoice:
        """Return the micro-batch × accumulation of `batch.size: auto`: the largest micro-batch the memory plan
        (`batch_planner`) fits on this device, or in `device_memory`. Raises InputError when not even one sample fits."""
        budget = device_budget(str(self.device), self.device_memory)
        if budget is None:
            raise InputError(f"{self.config.source}: batch.size auto: the free memory of {self.device} is unknown; "
                             "name the device's size with --device-memory 24GiB, or set batch.size.")
        return choose_batch(self.batch_planner(cache_dir).plan, *budget, self.config.batch.effective or AUTO_EFFECTIVE)

    def batch_planner(self, cache_dir: Path | None) -> StepPlanner:
        """Return the run's memory plan at any micro-batch, at the data's longest text and speech: the feature
        cache's training items (tts), the corpus's longest line (lm), else the model's position limits."""
        config, model = self.config, self.model_cfg.to_dict()
        limits = (int(model.get("max_text_tokens", 128)), int(model.get("max_speech_tokens", 0)) if config.task == "tts" else 0)
        lengths = cache_lengths(train_items(cache_dir), limits) if cache_dir is not None else None
        if lengths is None:
            lengths = Lengths(max(self.data.train.lengths), 0, "the corpus's longest line") if config.task == "lm" \
                else Lengths(*limits, "the model's position limits")
        adapter = config.adapter if config.adapter.kind != "none" else None
        host = sum(t.numel() * t.element_size() for t in self.base.state_dict.values()) if self.base is not None else 0
        return StepPlanner(self.family, model, self.frozen_rows, config.freeze.mode, adapter, host, lengths,
                           self.device.type, self.amp_dtype is not None, config.activation_checkpointing, self.world)

    def _add_replay(self) -> None:
        """Mix `data.replay.share` of every batch from the replay manifest's clips (features built like the run's);
        the replay manifest's val split becomes the base-language validation (`base_*` val metrics)."""
        replay = self.config.data.replay
        run = dataclasses.replace(self.family_run, manifest=self.settings.resolve(replay.manifest), extra=dict(self.family_run.extra))
        replay_data = self.family.task_data(run, self.model_cfg, self._rank_zero_first(lambda: self.family.prepare_features(run)))
        size = self.batch.size
        count = replay_count(size, replay.share)
        self.batcher = ReplayBatcher(self.data.train.lengths, replay_data.train.lengths, size, count,
                                     self.config.seed, self.rank, self.world)
        self.data = dataclasses.replace(self.data, train=joined_samples(self.data.train, replay_data.train))
        self.replay_val = replay_data.val
        self.replay = {"manifest": replay.manifest, "share": replay.share, "per_batch": count, "of_batch": size,
                       "clips": len(replay_data.train), "val_clips": len(replay_data.val)}

    def _prepare_cache(self) -> Path | None:
        return self._rank_zero_first(lambda: self.family.prepare_features(self.family_run))

    def _rank_zero_first(self, prepare: Any) -> Any:
        """Return `prepare()` (a feature cache's folder): rank 0 builds the cache, the other ranks wait for it,
        then find it complete."""
        if self.rank != 0:
            dist.barrier()
        result = prepare()
        if self.rank == 0 and self.world > 1:
            dist.barrier()
        return result

    def _setup_adapter(self, resume_loaded: Any) -> None:
        """Load the base weights (with a resumed adapter checkpoint's trained rows, grown when the
        tokenizer grew), then put the LoRA layers on and load the resumed LoRA matrices."""
        from core.training.adapter import full_weights, inject_lora, load_lora

        if self.base is None:
            raise InputError(f"{self.config.source}: adapter.kind lora adapts a trained model; set base_checkpoint.")
        weights, source = self.base.state_dict, str(self.base.path)
        if resume_loaded is not None:
            record = (resume_loaded.meta or {}).get("adapter")
            if not record:
                raise InputError(f"{resume_loaded.path} is not an adapter checkpoint; resume it without `adapter:` or start --fresh.")
            if record.get("base_sha256") != self.base.sha256:
                raise InputError(f"{resume_loaded.path} adapts {record.get('base_checkpoint')} (sha256 {record.get('base_sha256')}), "
                                 f"not {self.base.path}; set base_checkpoint to the adapter's base.")
            weights = full_weights(weights, resume_loaded.state_dict, self.frozen_rows)
            weights, source = self._grown(resume_loaded, weights), str(resume_loaded.path)
        self._load_weights(weights, source)
        self.adapter = inject_lora(self.model, self.family, self.config.adapter, self.config.source or "run config")
        self.adapter.update(base_checkpoint=str(self.base.path), base_sha256=self.base.sha256, frozen_rows=self.frozen_rows)
        if resume_loaded is not None:
            load_lora(self.model, resume_loaded.state_dict, str(resume_loaded.path))

    def _grown(self, loaded: Any, state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Return `state_dict` (published shape) with its text rows extended when the run's tokenizer
        grew since the checkpoint `loaded` (a prefix extension), else unchanged."""
        plan = resume_plan(loaded, self.tokenizer, self.settings)
        if plan.kind != "extension":
            return state_dict
        state_dict, report = extend_state_dict(
            state_dict, self.family.layout, plan.old_tokenizer, self.tokenizer, GROWTH_INIT, seed=self.config.seed
        )
        self.init, self.init_rows = init_record(report)
        self.log.line(f"vocabulary grew {plan.old_size} → {plan.new_size}: rows extended ({report['init']})")
        return state_dict

    def _load_weights(self, state_dict: dict[str, torch.Tensor], source: str) -> None:
        self.family.load_weights(self.model, state_dict, source, self.tokenizer)

    def base_rows_sha256(self) -> str | None:
        """Return the checksum of the model's frozen text rows (None when none are frozen)."""
        return self.family.base_rows_sha256(self.model)

    def _resume(self, loaded: Any, reset_optimizer: bool) -> None:
        plan = resume_plan(loaded, self.tokenizer, self.settings)
        if self.adapter is None:  # an adapter run loaded its weights before the LoRA layers went on
            self._load_weights(self._grown(loaded, loaded.state_dict), str(loaded.path))
        extra = loaded.extra
        saved_sha = extra.get("base_rows_sha256_start")
        require_unchanged(saved_sha, self.base_rows_sha256(), f"between {loaded.path} and this resume")
        self.base_sha_start = saved_sha
        if reset_optimizer:
            self.log.line("--reset-optimizer: fresh AdamW state; the schedule continues")
        else:
            shapes = dict(self.model.named_parameters())
            state, self.grown_rows = remap_optimizer_state(
                extra["optimizer"], extra["optimizer_names"], self.param_names, {n: shapes[n].shape for n in self.param_names}
            )
            self.optimizer.load_state_dict(state)
            if self.grown_rows:
                self.row_warmup = RowWarmup(shapes, self.grown_rows, self.config.optim.new_row_warmup_steps)
                self.log.line(f"Adam state remapped row by row: {self.grown_rows}")
            elif extra.get("row_warmup"):
                saved = extra["row_warmup"]
                self.row_warmup = RowWarmup(shapes, saved["rows"], saved["steps"], saved["done"])
        self.scheduler.load_state_dict(extra["scheduler"])
        for group, lr in zip(self.optimizer.param_groups, self.scheduler.get_last_lr()):
            group["lr"] = lr  # a fresh optimiser (--reset-optimizer) starts at the schedule's position too
        if extra.get("scaler"):
            self.scaler.load_state_dict(extra["scaler"])
        restore_rng(extra["rng"])
        self.batcher.load_state_dict(extra["data_position"])
        resized = self.batcher.resized_from
        if resized is not None:
            position = self.batcher.state_dict()
            ranks = {n: f"{n} rank" + "s" * (n != 1) for n in (int(extra.get("world_size", 1)), self.world)}
            self.log.line(f"the checkpoint's global batch was {resized['global_batch']} samples "
                          f"({ranks[int(extra.get('world_size', 1))]}), this run's is {position['global_batch']} "
                          f"({ranks[self.world]}): epoch {position['epoch']} continues at the same share, its batch "
                          f"{position['index']} (was {resized['index']}), cut anew")
        self.window.load_state_dict(extra.get("metric_window", {}), self.device)
        self.step = int(extra["step"])
        self.evaluation.resume(extra, loaded.path, self.step)
        self.parent = (loaded.meta or {}).get("parent", self.parent)
        self.release = (loaded.meta or {}).get("release", self.release)
        self.resumed_from = str(loaded.path)
        self.log.line(f"resumed from {loaded.path} at step {self.step} ({plan.kind} tokenizer)")

    # -- the loop --------------------------------------------------------------------------
    def _should_stop(self, collective: bool) -> bool:
        """Return True when STOP or SIGTERM asked to stop. Several ranks agree only when `collective`
        (at logging steps), so the other steps carry no host sync."""
        flag = self._stop_requested or self.folder.stop_file.exists()
        if self.world > 1:
            if not collective:
                return False
            tensor = torch.tensor([1.0 if flag else 0.0], device=self.device)
            dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
            flag = bool(tensor.item())
        return flag

    # -- speed -----------------------------------------------------------------------------
    def _speed_setup(self) -> None:
        """Choose the forward module (compiled or eager) and activation checkpointing; no effect on results."""
        self.data_position = self.batcher.state_dict()
        self.forward_module: nn.Module = self.ddp or self.model
        self.compile_seconds: float | None = None  # the first compiled step's time (tracing and compiling included)
        if self.config.activation_checkpointing and not self.family.enable_activation_checkpointing(self.model):
            self.log.line("activation_checkpointing: not supported by this model; ignored")
        wanted = self.config.compile
        self.compiled = wanted is True or (wanted == "auto" and compile_by_default(self.family.name, self.device.type))
        if self.compiled:  # regional: the repeated block once, not the whole model as one graph (core.training.compile)
            blocks = compile_blocks(self.model, COMPILE_BACKEND)
            self.compiled = blocks > 0
            self.log.line(f"compile: {blocks} transformer blocks compiled in place (one compiled forward, reused)"
                          if blocks else "compile: the model has no repeated transformer blocks; running eagerly")
        self._compile_unproven = self.compiled

    def _fall_back_to_eager(self, exc: BaseException) -> None:
        root = exc
        while getattr(root, "inner_exception", None) is not None:  # the compiler's own error, not dynamo's wrapper
            root = root.inner_exception
        reason = f"{type(root).__name__}: " + " ".join(line.strip() for line in str(root).splitlines() if line.strip())[:300]
        self.log.line(f"torch.compile failed ({reason}); continuing without compile")
        self.log.update_status(compile_error=reason)
        self.optimizer.zero_grad(set_to_none=True)
        uncompile_blocks(self.model)
        self.compiled = False

    # -- the loop --------------------------------------------------------------------------
    def _autocast(self) -> Any:
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    def _forward_backward(self, micro: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        """Run forward and backward over the micro-batches; return the metrics (the global batch's, the same on
        every rank: `core.training.reduction`) as device tensors."""
        totals: dict[str, torch.Tensor] = {}
        accumulate = len(micro)
        for index, batch in enumerate(micro):
            sync = self.ddp is None or index == accumulate - 1
            with (contextlib.nullcontext() if sync else self.ddp.no_sync()), self._autocast():
                loss, metrics = step_loss(self.data.forward(self.forward_module, batch), self.data.loss_weights, self.world)
                self.scaler.scale(loss / accumulate).backward()
            for name, value in metrics.items():
                value = value / accumulate
                totals[name] = totals[name] + value if name in totals else value
        return totals

    def _train_step(self, batches: Prefetcher) -> tuple[dict[str, torch.Tensor], int]:
        """Run one optimiser step on the next `batch.accumulate` batches.

        Returns the step's metrics as device tensors (nothing is read back to the host) and this
        rank's real token count (known on the host from the collate). The step's learning rate is left in
        `self.last_lr`. A failing first compiled step is redone eagerly (see `_fall_back_to_eager`).
        """
        self.model.train()
        micro = [batches.next() for _ in range(self.batch.accumulate)]
        self.data_position = batches.position
        tokens = sum(batch.pop("n_tokens") for batch in micro)  # this rank's, counted by the collate on the host
        if self._compile_unproven:
            saved = rng_state()
            started = time.monotonic()
            try:
                totals = self._forward_backward(micro)
                self.compile_seconds = round(time.monotonic() - started, 1)
                self.log.line(f"compile: first step (tracing and compiling the block) took {self.compile_seconds} s")
            except (torch.OutOfMemoryError, InputError, KeyboardInterrupt):
                raise
            except Exception as exc:  # noqa: BLE001 — any compiler failure: log it and go on eagerly
                self._fall_back_to_eager(exc)
                restore_rng(saved)
                totals = self._forward_backward(micro)
            self._compile_unproven = False
        else:
            totals = self._forward_backward(micro)
        self.scaler.unscale_(self.optimizer)
        trainable = [p for g in self.optimizer.param_groups for p in g["params"]]
        if self.config.optim.grad_clip > 0:
            totals["grad_norm"] = torch.nn.utils.clip_grad_norm_(trainable, self.config.optim.grad_clip)
        self.last_lr = self.scheduler.get_last_lr()[0]
        self.row_warmup.before()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.row_warmup.after()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return totals, tokens

    def validate(self) -> dict[str, float]:
        """Return the validation metrics over the whole val split (empty when it has no samples), and with
        replay the same over the replay manifest's val split, prefixed `base_`. Under several ranks every rank
        calls it: they share the batches out and sum what they scored."""
        metrics = self._validate_set(self.data.val)
        if self.replay_val is not None and len(self.replay_val):
            metrics.update({f"base_{k}": v for k, v in self._validate_set(self.replay_val).items()})
        return metrics

    def _validate_set(self, val: SampleSet) -> dict[str, float]:
        """Return the metrics over `val`, its batches shared out over the ranks."""
        if len(val) == 0:
            return {}
        return self._validate_over(val, list(range(len(val))), shard=True)

    @torch.no_grad()
    def _validate_over(self, val: SampleSet, subset: list[int], shard: bool = False) -> dict[str, float]:
        """Return the validation metrics over the samples of `val` at `subset` (non-empty): each entry's mean over
        every token it scores, the loss Σ weight × mean (`ScoredSums`: sums stay on the device, read once).

        With `shard` under several ranks (every rank calls it) each rank takes every world-th batch and the
        sums are added over the ranks; with fewer batches than ranks every rank takes all of them.
        """
        self.model.eval()
        batches = eval_batches(len(subset), self.batch.size)
        shared = shard and self.world > 1 and len(batches) >= self.world
        sums = ScoredSums()
        for positions in batches[self.rank :: self.world] if shared else batches:
            batch = to_device(self.data.collate(val.take([subset[p] for p in positions])), self.device)
            tokens = batch.pop("n_tokens")
            with self._autocast():
                sums.add(self.data.forward(self.model, batch), tokens)
        metrics, tokens = sums.means(self.data.loss_weights, self.device, all_ranks=shared)
        return self.data.finish_val(metrics, tokens)

    @torch.no_grad()
    def validate_base(self) -> float | None:
        """Return `val_base_loss`: the teacher-forced loss on the val samples in the base language
        (`eval.base_language`), None when the val split has none or the family gives no languages."""
        languages = self.data.val.extra.get("languages") or []
        subset = [i for i, language in enumerate(languages) if language == self.config.eval.base_language]
        if not subset:
            return None
        return self._validate_over(self.data.val, subset).get("loss")

    def _meta(self) -> CheckpointMeta:
        return CheckpointMeta(
            family=self.family.name,
            task=self.config.task,
            tokenizer_fingerprint=self.tokenizer.fingerprint,
            tokenizer_size=self.tokenizer.size,
            rows=rows_for(self.family.layout, self.tokenizer.size),
            base_size=self.base_size if self.base_size is not None else self.tokenizer.size,
            init=self.init,
            init_rows=self.init_rows,
            parent=self.parent,
            codec_fingerprint=self.family.feature_fingerprint(self.family_run),
            model_config=self.model_cfg.to_dict(),
            step=self.step,
            layout=self.family.sequence_layout,
            adapter=self.adapter,
            length_bounds=self.length_bounds,
            release=self.release,
        )

    def save(self, val_loss: float | None) -> Path | None:
        """Save a checkpoint of the current step (rank 0), rotate, refresh `best`; return its path."""
        require_unchanged(self.base_sha_start, self.base_rows_sha256(), f"at step {self.step}")
        if self.rank != 0:
            return None
        is_best = self.evaluation.note_val_loss(val_loss)
        extra = {
            "optimizer": self.optimizer.state_dict(),
            "optimizer_names": self.param_names,
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler.is_enabled() else {},
            "rng": rng_state(),
            "step": self.step,
            "data_position": self.data_position,
            "metric_window": self.window.state_dict(),
            **self.evaluation.checkpoint_extra(),
            "tokenizer_path": str(self.tokenizer.path),
            "codec_path": str(self.settings.resolve(self.config.codec)) if self.codec is not None else None,
            "frozen_rows": self.frozen_rows,
            "base_size": self.base_size,
            "world_size": self.world,
            "base_rows_sha256_start": self.base_sha_start,
            "row_warmup": self.row_warmup.state_dict(),
        }
        weights = trained_tensors(self.model) if self.adapter is not None else self.model.state_dict()
        path = save_checkpoint(self.folder.step_checkpoint(self.step), weights, self._meta(), extra)
        self.evaluation.after_save(path, self.step, is_best)
        rotate(self.run_dir, self.config.schedule.keep_last)
        self.log.update_status(last_checkpoint=str(path), step=self.step)
        return path

    def evaluate(self, checkpoint: Path) -> dict[str, float] | None:
        """Evaluate a saved checkpoint (tts, rank 0: `RunEvaluation.evaluate`); return the logged metrics, or None
        when skipped or failed."""
        if self.rank != 0 or self.config.task != "tts":
            return None
        return self.evaluation.evaluate(checkpoint, self.step)

    def _install_sigterm(self) -> Any:
        def request_stop(signum: int, frame: Any) -> None:  # noqa: ARG001
            self._stop_requested = True

        try:
            return signal.signal(signal.SIGTERM, request_stop)
        except ValueError:  # not the main thread: only the STOP file works
            return None

    def run(self) -> TrainResult:
        """Train until the stop step, a STOP file or SIGTERM; return the outcome.

        Raises InternalError when the frozen base rows changed (checked at start, at every
        checkpoint and at the end).
        """
        global _ranks_ended_together
        _ranks_ended_together = False
        cfg = self.config
        if self.rank == 0:
            self._take_folder()
        if self.world > 1:
            dist.barrier()
        sha = {"start": self.base_sha_start, "now": self.base_rows_sha256()}
        require_unchanged(sha["start"], sha["now"], "at start")
        padding = self.batcher.padding_share(self.batcher.epoch)
        info = {"padding_share": round(padding, 4), "filtered": self.data.filtered, "train_samples": len(self.data.train),
                "val_samples": len(self.data.val), "frozen_rows": self.frozen_rows, "world_size": self.world,
                "device": str(self.device), "cpu_threads": torch.get_num_threads() if self.device.type == "cpu" else None,
                "resumed_from": self.resumed_from, "compile": self.compiled,
                "replay": self.replay, "adapter": self._adapter_summary(), "compile_seconds": None,
                "batch": self.batch_choice.to_dict() if self.batch_choice else {"size": self.batch.size, "accumulate": self.batch.accumulate}}
        self.log.line(f"run {cfg.name}: {info}; base rows sha256 {sha['start']}")
        self.log.update_status(state="running", step=self.step, max_steps=self.stop_at, last_checkpoint=self.resumed_from,
                               base_rows_sha256=sha, pid=os.getpid(), **info)
        previous = self._install_sigterm()
        state, val, last = "failed", {}, None
        try:
            state, val, last = self._loop()
        except BaseException as exc:
            self._record_failure(exc)
            raise
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
            self.log.close()
        sha["now"] = self.base_rows_sha256()
        require_unchanged(sha["start"], sha["now"], "at the end")
        info["compile"] = self.compiled  # false after a fallback to eager
        info["compile_seconds"] = self.compile_seconds
        if self.world > 1:
            gathered: list[str] = [""] * self.world
            dist.all_gather_object(gathered, weights_sha256(self.model))
            info["rank_weights_sha256"] = gathered
            _ranks_ended_together = True
        if self.config.schedule.eval_every > 0:
            info["best_metric"] = self.evaluation.best_metric
            info["best_eval"] = self.evaluation.best_eval
        self.log.update_status(state=state, step=self.step, base_rows_sha256=sha, **info)
        self.log.line(f"{state} at step {self.step}; base rows sha256 {sha['now']}")
        return TrainResult(state, self.step, self.run_dir, last, self.evaluation.best_val, sha, val, info)

    def _adapter_summary(self) -> dict[str, Any] | None:
        """Return the adapter's kind, rank, alpha and targets, and the trainable parameter count (None without one)."""
        if self.adapter is None:
            return None
        trainable = sum(p.numel() for p in self.model.parameters() if p.requires_grad)
        return {**{k: self.adapter[k] for k in ("kind", "rank", "alpha", "targets")}, "trainable_parameters": trainable}

    def _take_folder(self) -> None:
        """Make the run folder this run's (rank 0, once set-up passed): move an earlier run aside for
        `fresh`, open the log at the step training continues from, remove what killed saves left,
        clear STOP and write the run config."""
        moved = self.folder.move_aside() if self.fresh and self.folder.path.exists() else None
        self.log.open(resume_step=self.step)
        if moved is not None:
            self.log.line(f"--fresh: the earlier run {self.folder.name} was moved to {moved.path}")
        for path in remove_orphaned_saves(self.folder.checkpoints):
            self.log.line(f"removed {path.name}: the temporary file of a save that never finished")
        self.folder.stop_file.unlink(missing_ok=True)
        if moved is not None or self.config_path != self.folder.config.resolve():  # else it holds this config
            save_run_config(self.config, self.folder.config)

    def _loop(self) -> tuple[str, dict[str, float], str | None]:
        batches = Prefetcher(self.batcher, self.data.train, self.data.collate, self.device, self.config.data.prefetch)
        try:
            return self._steps(batches)
        finally:
            batches.close()

    def _steps(self, batches: Prefetcher) -> tuple[str, dict[str, float], str | None]:
        cfg = self.config.schedule
        val: dict[str, float] = {}
        last: str | None = self.resumed_from  # a resume that has no step left still reports its checkpoint
        window_tokens, window_start = 0, time.monotonic()
        status_written = window_start
        if cfg.eval_every > 0 and self.step == 0 and self.config.task == "tts" and self.rank == 0:
            self.evaluation.check_retention(self.step)  # step 0's val_base_loss, the baseline of the retention warning
        while self.step < self.stop_at:
            metrics, tokens = self._train_step(batches)
            self.step += 1
            self.window.add(metrics)
            window_tokens += tokens
            on_grid = self.step % cfg.log_every == 0
            log_now = on_grid or self.step == self.stop_at
            if log_now:
                elapsed = max(time.monotonic() - window_start, 1e-9)
                values = self.window.read(reset=on_grid)  # the one device-to-host transfer of the window
                values["lr"] = self.last_lr
                values["tokens_per_s"] = window_tokens * self.world / elapsed  # rank shares differ by ≤ 1 sample
                self.log.metrics(self.step, "train", self.data.train_metrics(values))
                self.log.update_status(step=self.step)
                window_tokens, window_start = 0, time.monotonic()
                status_written = time.monotonic()
            elif time.monotonic() - status_written >= STATUS_INTERVAL_S:
                self.log.update_status(step=self.step)
                status_written = time.monotonic()
            stopping = self._should_stop(collective=log_now)
            done = self.step >= self.stop_at
            val_now: dict[str, float] = {}
            if self.step % cfg.val_every == 0 or done or stopping:
                val = val_now = self.validate()
                if val:
                    self.log.metrics(self.step, "val", val)
            if self.step % cfg.save_every == 0 or done or stopping:
                saved = self.save(val_now.get("loss"))
                last = str(saved) if saved else last
                # every eval_every-th regular save (by step, so a resume keeps the rhythm) and the last one
                eval_period = cfg.save_every * cfg.eval_every
                if saved and cfg.eval_every > 0 and not stopping and (self.step % eval_period == 0 or done):
                    self.evaluate(saved)
            if stopping:
                return "stopped", val, last
        return "finished", val, last


def training_length_bounds(cache_dir: Path) -> list[float] | None:
    """Return the length detector's (low, high) speech tokens per character over the train split of the
    feature cache at `cache_dir` (rounded to 4 places), or None with fewer than 2 training clips."""
    from core.eval.quality.detectors import length_bounds, tokens_per_char

    train = train_items(cache_dir)
    if len(train) < 2:
        return None
    low, high = length_bounds(tokens_per_char([item["n_codes"] for item in train], [item["text"] for item in train]))
    return [round(low, 4), round(high, 4)]


def train_items(cache_dir: Path) -> list[dict[str, Any]]:
    """Return the index entries of the train split of the feature cache at `cache_dir`."""
    from core.data.cache import SHARED_INDEX_FORMATS
    from core.data.feature_cache import open_cache

    return [item for item in open_cache(cache_dir, SHARED_INDEX_FORMATS).items if item["split"] == "train"]

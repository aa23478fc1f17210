"""Training steps of the published model families: tokens/s, MFU and peak memory beside the memory plan.

Per family — Chatterbox T3 (`Llama_520M`, 30 layers) and IndexTTS2's GPT (`UnifiedVoice` at the published
config.yaml: 1280 × 24, its conditioning encoders, `gpt.checkpointing` as published) — full fine-tune
(`freeze.mode: base-rows`) and LoRA (rank 16 on the family's default targets, new text rows trained),
`torch.compile` off and on: the trainer's step on random tokens — the family's training forward (the
`forward` of its TaskData: `t3_forward`, `indextts_forward`; frozen base rows as buffers), the trainer's
AdamW (`build_optimizer`: fused on CUDA), gradient clipping, bf16 autocast on CUDA, `torch.compile(model,
dynamic=True)` as the trainer compiles. Batch 8 of 64 text + 300 speech tokens (T3, with a 150-token
prompt) or 64 text + 500 semantic codes (IndexTTS2, 32 cached conditioning latents). Each row:
ms/step, tokens/s (text + speech), MFU, the peak (the CUDA allocator's, less what was allocated before
the model was built) and the memory plan's peak (`core.training.memory.plan_memory`) with their ratio.
MFU = FLOPs per token × tokens/s ÷ the device's peak dense bf16 FLOP/s, FLOPs per token = 6 N (full
fine-tune) or 4 N + 6 N_LoRA (LoRA), N = the weights the step multiplies by (blocks and heads; the
cached conditioning encoders do not run). A plain loop over the published class (its own forward,
AdamW over every parameter, compile off) is a reference row per family. Eager rows run first, then the
compiled ones (one warm-up step more for compilation, two timed steps less); a row that fails says why,
and with `--budget SECONDS` the rows not started in time are listed as skipped.

`--memory`: the plan against the measured peak on the CPU, each case in its own process: peak RSS
(VmHWM, reset after the idle baseline) less the idle baseline (after imports and the batch, before the
model is built), at reduced (`--smoke`: width kept, depth 2) or full shapes, full fine-tune and LoRA.

    .venv/bin/python bench/families.py --json --budget 240 --output families.json   # CUDA: every row that starts in 4 min
    .venv/bin/python bench/families.py --smoke --json          # reduced shapes on the CPU, the whole path
    .venv/bin/python bench/families.py --memory --smoke        # plan vs measured peak RSS, reduced shapes
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from bench.common import peak_tflops  # noqa: E402
from bench.profile_summary import profile_step  # noqa: E402
from core.families.registry import get_model_family  # noqa: E402
from core.training.memory import GIB, BLOCKS, StepShape, plan_memory  # noqa: E402

FIXTURE = REPO_ROOT / "tests" / "fixtures" / "indextts2" / "config.yaml"
GROWN = 256  # new text rows on top of the published vocabulary (a new language's pieces)
CHATTERBOX_ROWS, INDEXTTS_ROWS, TURBO_ROWS = 2454, 12000, 50276
FAMILIES = ("chatterbox", "indextts", "chatterbox-turbo")
NAMES = {"chatterbox": "chatterbox T3", "indextts": "indextts2 GPT", "chatterbox-turbo": "chatterbox-turbo T3"}
LENGTHS = {"chatterbox": (62, 298), "indextts": (64, 500), "chatterbox-turbo": (62, 298)}  # text ids and speech tokens of each sample
PROMPT = 150
AUTO_CAP = 256  # the largest micro-batch the auto-batch rows may take
LOSS_WEIGHTS = {"text_loss": 0.2, "mel_loss": 0.8}
SMALL_CONFORMER = {"output_size": 32, "linear_units": 64, "attention_heads": 2, "num_blocks": 1, "input_layer": "conv2d2",
                   "perceiver_mult": 2}


class Case(NamedTuple):
    """One training step to run: family, shape (`full`, `smoke`: 1 layer, `reduced`: 2 layers at full width),
    LoRA or full fine-tune, batch, text ids and speech tokens per sample, precision, compile, device type."""

    family: str
    shape: str
    lora: bool
    batch: int
    text: int
    speech: int
    half: bool
    compile: bool = False
    device: str = "cpu"


def model_config(family: str, shape: str) -> dict[str, Any]:
    """Return the model config (`to_dict()`) of the family at `shape`, its vocabulary grown by GROWN rows."""
    if family == "chatterbox":
        from core.families.chatterbox.t3 import ChatterboxConfig

        layers = {"full": 30, "reduced": 2, "smoke": 1}[shape]
        return ChatterboxConfig(text_tokens_dict_size=CHATTERBOX_ROWS + GROWN, n_layers=layers, hidden_size=1024,
                                intermediate_size=4096).to_dict()
    if family == "chatterbox-turbo":
        from core.families.chatterbox_turbo.t3 import TurboConfig

        layers = {"full": 24, "reduced": 2, "smoke": 1}[shape]
        return TurboConfig(text_tokens_dict_size=TURBO_ROWS + GROWN, n_layers=layers, hidden_size=1024).to_dict()
    import yaml

    from core.families.indextts.gpt import IndexTTSModelConfig

    config = yaml.safe_load(FIXTURE.read_text(encoding="utf-8"))
    gpt = dict(config["gpt"], number_text_tokens=INDEXTTS_ROWS + GROWN)
    if shape != "full":
        gpt.update(layers=2 if shape == "reduced" else 1, condition_module=dict(SMALL_CONFORMER),
                   emo_condition_module=dict(SMALL_CONFORMER))
    if shape == "smoke":
        gpt.update(model_dim=256, heads=4)
    return IndexTTSModelConfig(gpt, config).to_dict()


def base_rows(family: str) -> int:
    """Return the published vocabulary's rows, frozen in a run that grows it."""
    return {"chatterbox": CHATTERBOX_ROWS, "indextts": INDEXTTS_ROWS, "chatterbox-turbo": TURBO_ROWS}[family]


def make_batch(family: str, config: dict[str, Any], case: Case) -> dict[str, Any]:
    """Return the family's collated batch of `case.batch` random samples (the collate its TaskData uses)."""
    g = torch.Generator().manual_seed(0)
    rows = base_rows(family) + GROWN
    if family in ("chatterbox", "chatterbox-turbo"):
        from core.families.chatterbox.layout import collate
        from core.families.chatterbox_turbo.layout import PROMPT_TOKENS, collate as turbo_collate

        prompt = PROMPT if family == "chatterbox" else PROMPT_TOKENS
        collate = collate if family == "chatterbox" else turbo_collate
        samples = [{"text_ids": torch.randint(1, rows, (case.text,), generator=g),
                    "codes": torch.randint(0, 6561, (case.speech,), generator=g),
                    "prompt": torch.randint(0, 6561, (prompt,), generator=g),
                    "speaker_emb": F.normalize(torch.randn(256, generator=g), dim=0)} for _ in range(case.batch)]
        batch = collate(samples)
    else:
        from core.families.indextts.training import collate_indextts

        width = config["kwargs"]["model_dim"]
        samples = [{"text_ids": torch.randint(2, rows, (case.text,), generator=g).numpy(),
                    "codes": torch.randint(0, 8192, (case.speech,), generator=g).numpy(),
                    "condition": torch.randn(32, width, generator=g), "emo_vec": torch.randn(width, generator=g)}
                   for _ in range(case.batch)]
        batch = collate_indextts(samples)
    batch.pop("n_tokens")
    return batch


def family_forward(family: str) -> Callable[[torch.nn.Module, dict[str, Any]], torch.Tensor]:
    """Return the family's training loss (its TaskData `forward`, then the default 0.2 / 0.8 loss weights)."""
    from core.families.contract import weighted_loss

    if family in ("chatterbox", "chatterbox-turbo"):
        from core.families.chatterbox.t3 import t3_forward as forward
    else:
        from core.families.indextts.training import indextts_forward as forward
    return lambda module, batch: weighted_loss(forward(module, batch), LOSS_WEIGHTS)


def build(case: Case, config: dict[str, Any], device: torch.device) -> torch.nn.Module:
    """Return the family's model as a run trains it: frozen base rows, then LoRA or the base-rows freeze."""
    from core.training.adapter import inject_lora
    from core.training.run_config import AdapterConfig

    family = get_model_family(case.family)
    torch.manual_seed(0)
    model = family.build_model(config, base_rows(case.family)).to(device).train()
    if case.lora:
        inject_lora(model, family, AdapterConfig(kind="lora"), "bench")
    else:
        family.apply_freeze(model, "base-rows")
    return model


def plan_of(case: Case, config: dict[str, Any], accumulate: int = 1) -> Any:
    """Return the memory plan of `case`, `accumulate` micro-batches a step (what the doctor's `memory.batch` check plans)."""
    from core.training.run_config import AdapterConfig

    step = StepShape(case.batch, case.text, case.speech, case.half, False, case.device, accumulate)
    return plan_memory(get_model_family(case.family), config, step, frozen_rows=base_rows(case.family),
                       freeze_mode="base-rows", adapter=AdapterConfig(kind="lora") if case.lora else None)


def multiplied_weights(case: Case, config: dict[str, Any]) -> tuple[int, int]:
    """Return (N, N trained): the weights one step multiplies by (blocks and heads) and, for LoRA, the adapters'."""
    shape = get_model_family(case.family).memory_shape(config)
    n = shape.layers * BLOCKS[shape.block].matmul_params(shape.width, shape.mlp_width) + (shape.text_rows + shape.speech_rows) * shape.width
    lora = plan_of(case, config).parameters.trainable if case.lora else n
    return n, lora


class Stepper:
    """The trainer's step for one model: forward (optionally compiled) under autocast, backward, clip, AdamW."""

    def __init__(self, model: torch.nn.Module, loss: Callable[[torch.nn.Module], torch.Tensor], device: torch.device,
                 half: bool, compiled: bool) -> None:
        from core.training.optim import build_optimizer
        from core.training.run_config import OptimConfig

        from core.training.compile import compile_blocks

        self.model, self.loss, self.half, self.device = model, loss, half, device
        self.module = model
        if compiled:  # as the trainer compiles: the repeated block, in place
            compile_blocks(model, "inductor")
        self.optimizer, _ = build_optimizer(model, OptimConfig())
        self.params = [p for g in self.optimizer.param_groups for p in g["params"]]

    def step(self) -> None:
        """Run one optimiser step."""
        autocast = torch.autocast(self.device.type, dtype=torch.bfloat16) if self.half else contextlib.nullcontext()
        with autocast:
            loss = self.loss(self.module)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_steps(stepper: Stepper, warmup: int, steps: int) -> float:
    """Return seconds per step over `steps` timed steps after `warmup` steps (compilation happens there)."""
    for _ in range(warmup):
        stepper.step()
    _sync(stepper.device)
    start = time.perf_counter()
    for _ in range(steps):
        stepper.step()
    _sync(stepper.device)
    return (time.perf_counter() - start) / steps


def plain_loss(family: str, model: Any, batch: dict[str, Any]) -> torch.Tensor:
    """Return the loss of the published class's own forward with shifted labels (what community trainers run)."""
    if family == "chatterbox":
        from chatterbox.models.t3.modules.cond_enc import T3Cond

        cond = T3Cond(speaker_emb=batch["speaker_emb"], cond_prompt_speech_tokens=batch["prompt"],
                      emotion_adv=0.5 * torch.ones(batch["prompt"].size(0), 1, 1, device=batch["prompt"].device))
        out = model(t3_cond=cond, text_tokens=batch["text_ids"], text_token_lens=batch["text_lengths"],
                    speech_tokens=batch["codes"], speech_token_lens=batch["code_lengths"], training=True)
        text_loss = F.cross_entropy(out.text_logits[:, :-1].float().transpose(1, 2), batch["text_ids"][:, 1:])
        return 0.2 * text_loss + 0.8 * F.cross_entropy(out.speech_logits[:, :-1].float().transpose(1, 2), batch["codes"][:, 1:])
    from core.families.indextts.layout import conditioning_prefix

    conds = conditioning_prefix(model, batch["condition"], batch["emo_vec"])
    text_in, text_target = model.build_aligned_inputs_and_targets(F.pad(batch["text"][:, 1:-1], (0, 1), value=1), 0, 1)
    code_in, code_target = model.build_aligned_inputs_and_targets(F.pad(batch["speech"][:, 1:], (0, 1), value=8193), 8192, 8193)
    text_emb = model.text_embedding(text_in) + model.text_pos_embedding(text_in)
    mel_emb = model.mel_embedding(code_in) + model.mel_pos_embedding(code_in)
    text_logits, mel_logits = model.get_logits(conds, text_emb, model.text_head, mel_emb, model.mel_head)
    return 0.2 * F.cross_entropy(text_logits.float(), text_target) + 0.8 * F.cross_entropy(mel_logits.float(), code_target)


def build_plain(family: str, config: dict[str, Any], device: torch.device) -> torch.nn.Module:
    """Return the published class at `config`'s shape with every parameter trainable (no split rows)."""
    torch.manual_seed(0)
    if family == "chatterbox":
        from chatterbox.models.t3 import T3

        from core.families.chatterbox.t3 import ChatterboxConfig, t3_hparams

        return T3(t3_hparams(ChatterboxConfig.from_dict(config))).to(device).train()
    from core.families.indextts.gpt import build_unified_voice

    return build_unified_voice(config["kwargs"]).to(device).train()


def run_case(case: Case, device: torch.device, warmup: int, steps: int, peak: float | None, plain: bool = False,
             profiled: bool = False) -> dict[str, Any]:
    """Return the row of `case` on `device`: ms/step, tokens/s, MFU, measured and planned peak memory, the warm-up's
    seconds (compilation included) and with `profiled` where the step's time goes (bench/profile_summary.py)."""
    config = model_config(case.family, case.shape)
    batch = {k: v.to(device) if torch.is_tensor(v) else v for k, v in make_batch(case.family, config, case).items()}
    tokens = case.batch * (case.text + case.speech + {"chatterbox": 4, "indextts": 3, "chatterbox-turbo": 2}[case.family])  # with start/stop tokens
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
    if plain:
        model = build_plain(case.family, config, device)
        stepper = Stepper(model, lambda m: plain_loss(case.family, m, batch), device, case.half, False)
    else:
        model = build(case, config, device)
        forward = family_forward(case.family)
        stepper = Stepper(model, lambda m: forward(m, batch), device, case.half, case.compile)
    warmup_s = time_steps(stepper, 0, warmup) * warmup  # the first steps: compilation, for a compiled row
    seconds = time_steps(stepper, 0, steps)
    measured = torch.cuda.max_memory_allocated(device) - before if device.type == "cuda" else None
    profile = profile_step(stepper.step, device) if profiled else None
    n, trained = multiplied_weights(case, config)
    flops = (6 * n if not case.lora else 4 * n + 6 * trained) * tokens / seconds
    plan = plan_of(case, config) if not plain else None
    del stepper, model
    return {
        **describe(case, plain), "step_ms": round(seconds * 1000, 1),
        "tokens_per_s": round(tokens / seconds, 1), "parameters": n,
        "mfu": round(flops / (peak * 1e12), 4) if peak else None,
        "peak_memory_gib": round(measured / GIB, 2) if measured is not None else None,
        "plan_gib": round(plan.peak / GIB, 2) if plan else None,
        "plan_error": round(measured / plan.peak - 1, 3) if plan and measured else None,
        "warmup_s": round(warmup_s, 1), **({"profile": profile} if profile else {}),
    }


def describe(case: Case, plain: bool = False) -> dict[str, Any]:
    """Return what names a row: model, family, mode, precision, batch, lengths, compile."""
    mode = "plain loop" if plain else ("LoRA" if case.lora else "full fine-tune")
    return {"model": f"{NAMES[case.family]} ({case.shape}), {mode}",
            "family": case.family, "mode": mode, "precision": "bf16" if case.half else "fp32", "batch": case.batch,
            "text_tokens": case.text, "speech_tokens": case.speech, "compile": case.compile}


def auto_batch(case: Case, device: torch.device, upper: int) -> dict[str, Any]:
    """Return `batch: {size: auto}`'s choice for `case` on `device` (its free memory; the CPU's available memory):
    the largest micro-batch the memory plan fits, up to `upper` samples per step (core.training.auto_batch)."""
    from core.training.auto_batch import choose_batch, device_budget

    config = model_config(case.family, case.shape)
    budget = device_budget(str(device), None)
    if budget is None:
        raise RuntimeError(f"the free memory of {device} is unknown")
    return choose_batch(lambda b, accumulate=1: plan_of(case._replace(batch=b), config, accumulate), *budget, upper).to_dict()


def rows(device: torch.device, smoke: bool, compile_modes: tuple[bool, ...] | None = None,
         families: tuple[str, ...] = FAMILIES, on_row: Callable[[list[dict[str, Any]]], None] | None = None,
         budget_s: float | None = None, auto: bool = False, profiled: bool = False) -> list[dict[str, Any]]:
    """Return the table's rows (bench/gpu.py's family rows): per family the full fine-tune, LoRA and the plain loop
    (the published class's own forward; none for Turbo, which publishes no training forward) eagerly, then the full fine-tune and LoRA compiled (compile: on CUDA; on the CPU only when asked); batch 8
    (smoke: 2). A row that fails (a compile error, out of memory) says why instead of its figures; rows not started
    within `budget_s` seconds are listed as skipped. `on_row` sees the rows so far after each one. With `auto` the
    full fine-tune and LoRA run again at `batch: {size: auto}`'s micro-batch (`auto_batch`, recorded in the row);
    with `profiled` each eager row at batch 8 carries its step's profile (bench/profile_summary.py)."""
    batch, warmup, steps = (2, 1, 1) if smoke else (8, 1, 5)
    half = device.type == "cuda"
    modes = compile_modes if compile_modes is not None else ((False, True) if device.type == "cuda" else (False,))
    shape = "smoke" if smoke else "full"
    peak = peak_tflops(device, None)
    todo = [(Case(f, shape, lora, batch, *LENGTHS[f], half, False, device.type), plain)
            for f in families for lora, plain in ((False, False), (True, False), (False, True))
            if not (plain and f == "chatterbox-turbo")] if False in modes else []
    todo += [(Case(f, shape, lora, batch, *LENGTHS[f], half, True, device.type), False)
             for f in families for lora in (False, True)] if True in modes else []
    if auto:
        todo += [(Case(f, shape, lora, 0, *LENGTHS[f], half, False, device.type), False) for f in families for lora in (False, True)]
    start, out = time.monotonic(), []
    for case, plain in todo:
        if budget_s is not None and time.monotonic() - start > budget_s:
            out.append({**describe(case, plain), "skipped": f"not started within the {budget_s:.0f} s budget"})
        else:
            try:
                chosen = auto_batch(case, device, 4 if smoke else AUTO_CAP) if case.batch == 0 else None
                case = case._replace(batch=chosen["size"]) if chosen else case
                row = run_case(case, device, warmup + case.compile, max(1, steps - 2 * case.compile), peak, plain,
                               profiled and not case.compile and not chosen)
                out.append({**row, "auto_batch": chosen} if chosen else row)
            except Exception as exc:  # noqa: BLE001 — a failed row says why; the others still run
                out.append({**describe(case, plain), "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"})
            finally:
                if device.type == "cuda":
                    torch.cuda.empty_cache()
        if on_row:
            on_row(out)
    return out


# ---------------------------------------------------------------- plan vs measured peak RSS on the CPU


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def measure_rss(case: Case, steps: int = 2) -> dict[str, Any]:
    """Return the plan of `case` and its measured peak on the CPU: VmHWM after `steps` steps less the idle
    baseline VmRSS (imports done, batch built, model not yet built; VmHWM reset there)."""
    config = model_config(case.family, case.shape)
    batch = make_batch(case.family, config, case)
    forward = family_forward(case.family)
    plan = plan_of(case, config)
    baseline = _status_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    model = build(case, config, torch.device("cpu"))
    stepper = Stepper(model, lambda m: forward(m, batch), torch.device("cpu"), case.half, False)
    for _ in range(steps):
        stepper.step()
    measured = _status_kib("VmHWM") - baseline
    return {"case": case._asdict(), "measured": measured, "plan": plan.peak, "error": round(measured / plan.peak - 1, 3),
            "parts": plan.parts, "trainable": plan.parameters.trainable}


MMAP_THRESHOLD = "65536"  # glibc: blocks from 64 KiB up are mapped and unmapped, so RSS follows the live tensors


def memory_table(cases: list[Case]) -> list[dict[str, Any]]:
    """Return `measure_rss` of each case, each run in a fresh process (one at a time), measured twice: with glibc
    returning freed blocks of 64 KiB and more to the system (`MALLOC_MMAP_THRESHOLD_`, the figure the plan is held
    to) and with glibc's defaults (it keeps freed heap memory for reuse: `measured_default`)."""
    results = []
    for case in cases:
        runs = {}
        for name, extra in (("mmap", {"MALLOC_MMAP_THRESHOLD_": MMAP_THRESHOLD}), ("default", {})):
            env = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}
            env.update({"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2"), **extra})
            proc = subprocess.run([sys.executable, __file__, "--measure", json.dumps(case._asdict())], capture_output=True,
                                  text=True, env=env)
            if proc.returncode != 0:
                raise RuntimeError(f"{case}: {proc.stderr[-2000:]}")
            runs[name] = json.loads(proc.stdout.strip().splitlines()[-1])
        results.append({**runs["mmap"], "measured_default": runs["default"]["measured"]})
    return results


def memory_cases(smoke: bool) -> list[Case]:
    """Return the plan-vs-measured cases: reduced shapes (depth 2 at full width, batch 2; fp32 full fine-tune and
    LoRA, bf16 autocast full fine-tune) or full shapes (batch 1, 30 text + 100 speech tokens; full fine-tune and LoRA)."""
    if smoke:
        return [Case(f, "reduced", lora, 2, *LENGTHS[f], half) for f in FAMILIES
                for lora, half in ((False, False), (True, False), (False, True))]
    return [Case(f, "full", lora, 1, 30, 100, False) for f in FAMILIES for lora in (False, True)]


def device_name(device: torch.device) -> str:
    """Return the GPU's name on CUDA, else the CPU's (what the figures were measured on)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine()


def render(table: list[dict[str, Any]]) -> str:
    """Return the rows as a Markdown table."""
    lines = ["| model | precision | batch | compile | ms/step | tokens/s | MFU | peak GiB | plan GiB | measured/plan |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        if "step_ms" not in r:
            lines.append(f"| {r['model']} | {r['precision']} | {r['batch']} | {r['compile']} | {r.get('error') or r.get('skipped')} |")
            continue
        mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") is not None else "-"
        ratio = f"{1 + r['plan_error']:.2f}" if r.get("plan_error") is not None else "-"
        lines.append(f"| {r['model']} | {r['precision']} | {r['batch']} | {r['compile']} | {r['step_ms']} | {r['tokens_per_s']:,.0f} | "
                     f"{mfu} | {r['peak_memory_gib'] if r['peak_memory_gib'] is not None else '-'} | {r['plan_gib'] or '-'} | {ratio} |")
    return "\n".join(lines)


def main() -> None:
    """Parse options, run the benchmark, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="reduced shapes (1 layer; --memory: 2 layers) on the CPU")
    parser.add_argument("--memory", action="store_true", help="the plan against the measured peak RSS on the CPU")
    parser.add_argument("--compile", choices=["off", "on", "both"], default=None, help="compile modes (default: both on CUDA, off on the CPU)")
    parser.add_argument("--family", action="append", choices=list(FAMILIES), help="only this family (repeatable)")
    parser.add_argument("--budget", type=float, default=None, help="seconds after which rows not yet started are skipped")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--auto-batch", action="store_true", help="rows at batch: {size: auto}'s micro-batch too")
    parser.add_argument("--profile", action="store_true", help="each eager batch-8 row's step profiled by kind of work")
    parser.add_argument("--output", type=Path, help="also write the JSON report here")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # one `--memory` case, in its own process
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure_rss(Case(**json.loads(args.measure)))))
        return
    device = torch.device("cuda" if torch.cuda.is_available() and not args.memory else "cpu")
    if args.memory:
        report: dict[str, Any] = {"device": device_name(device), "memory": memory_table(memory_cases(args.smoke))}
        text = "\n".join(f"{r['case']['family']} {r['case']['shape']} {'LoRA' if r['case']['lora'] else 'full'} "
                         f"{'bf16' if r['case']['half'] else 'fp32'}: plan {r['plan'] / GIB:.2f} GiB, measured {r['measured'] / GIB:.2f} GiB "
                         f"({r['error']:+.1%}); glibc defaults {r['measured_default'] / GIB:.2f} GiB" for r in report["memory"])
    else:
        modes = {"off": (False,), "on": (True,), "both": (False, True), None: None}[args.compile]
        head = {"device": device_name(device), "torch": torch.__version__}

        def keep(done: list[dict[str, Any]]) -> None:
            if args.output:
                args.output.write_text(json.dumps({**head, "rows": done, "finished": False}, indent=2), encoding="utf-8")

        table = rows(device, args.smoke, modes, tuple(args.family or FAMILIES), keep, args.budget, args.auto_batch, args.profile)
        report = {**head, "rows": table, "finished": True}
        text = render(table)
    if args.output:
        args.output.write_text(json.dumps(report, indent=2), encoding="utf-8")
    print(json.dumps(report, indent=2) if args.json else text)


if __name__ == "__main__":
    main()

"""Where a training step's time goes: a `torch.profiler` trace summarised by kind of work.

`profile_step(step, device)` profiles a few calls of `step` (after one warm-up) and `summarise(profiler)`
groups the operators' self time (CUDA's on a GPU, the CPU's otherwise) into the kinds the issue asks
about — matmuls, attention, the cross-entropy, the optimiser, copies and indexing, host
synchronisations, elementwise and the rest — with each kind's share and the top operators, so the
device run's JSON says what a step pays for and docs/benchmarks.md can quote it.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.profiler import ProfilerActivity, profile

#: kinds of work, first match wins, by substrings of the operator's name
KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("host sync", ("_local_scalar_dense", "item", "synchronize", "nonzero", "cudaStreamSynchronize", "cudaMemcpy")),
    ("attention", ("scaled_dot_product", "flash", "efficient_attention", "cudnn_attention", "softmax_backward")),
    ("cross-entropy", ("log_softmax", "nll_loss", "cross_entropy")),
    ("optimizer", ("adam", "foreach", "clip_grad", "norm")),
    ("matmul", ("mm", "matmul", "linear", "gemm", "addmm", "bmm")),
    ("copies and indexing", ("copy", "cat", "index", "gather", "scatter", "to", "clone", "contiguous", "embedding", "where", "pad")),
    ("elementwise", ("add", "mul", "div", "sub", "gelu", "silu", "sigmoid", "tanh", "exp", "pow", "rsqrt", "sum", "mean",
                     "layer_norm", "dropout", "fill", "zero")),
)


def kind_of(name: str) -> str:
    """Return the kind of work of the operator `name` (`other` when none matches)."""
    lowered = name.lower()
    for kind, needles in KINDS:
        if any(needle.lower() in lowered for needle in needles):
            return kind
    return "other"


def summarise(profiler: Any, top: int = 8, steps: int = 1) -> dict[str, Any]:
    """Return the profiled time per step by kind (ms, share), the top operators by self time and the timeline used
    (`cuda` or `cpu`), from a finished `torch.profiler.profile` over `steps` steps."""
    events = profiler.key_averages()
    cuda = any(getattr(e, "self_device_time_total", 0) > 0 for e in events)

    def self_us(event: Any) -> float:
        return float(event.self_device_time_total if cuda else event.self_cpu_time_total)

    timed = [(e.key, self_us(e)) for e in events if self_us(e) > 0]
    total = sum(us for _, us in timed) or 1.0
    kinds: dict[str, float] = {}
    for name, us in timed:
        kinds[kind_of(name)] = kinds.get(kind_of(name), 0.0) + us
    return {
        "timeline": "cuda" if cuda else "cpu",
        "ms_per_step": round(total / 1000 / steps, 3),
        "kinds": {k: {"ms": round(us / 1000 / steps, 3), "share": round(us / total, 4)}
                  for k, us in sorted(kinds.items(), key=lambda item: -item[1])},
        "top": [{"op": name, "ms": round(us / 1000 / steps, 3), "share": round(us / total, 4), "kind": kind_of(name)}
                for name, us in sorted(timed, key=lambda item: -item[1])[:top]],
    }


def profile_step(step: Callable[[], None], device: torch.device, steps: int = 2) -> dict[str, Any]:
    """Return `summarise` of `steps` calls of `step` on `device` (one warm-up call first, not profiled)."""
    step()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as profiler:
        for _ in range(steps):
            step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    return summarise(profiler, steps=steps)

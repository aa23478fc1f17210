"""Training memory estimate: weights, gradients, AdamW moments, activations and logits for one batch.

Rough by design (within a factor of about two), so the doctor can warn before minutes of work
end in an out-of-memory error, and suggest a batch size that fits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

HEADROOM = 0.8


def parameter_count(config: dict[str, Any], task: str) -> int:
    """Return the approximate number of parameters of a model config (text rows, backbone, speech side)."""
    d, layers = config["d_model"], config["n_layers"]
    count = layers * 12 * d * d + 2 * config["text_rows"] * d + (config.get("max_text_tokens", 0) + 2) * d
    if task == "tts":
        codes = config["codebook_size"] + 2
        count += 2 * codes * d + (config.get("max_speech_tokens", 0) + 2) * d + config.get("n_mels", 80) * d * 3 + 4 * d * d
    return count


def sequence_length(config: dict[str, Any], task: str) -> int:
    """Return the longest sequence a batch can hold (positions of text, speech and conditioning)."""
    if task == "tts":
        return config.get("n_latents", 4) + config["max_text_tokens"] + config["max_speech_tokens"] + 4
    return config["max_text_tokens"] + 1


def estimate_bytes(
    config: dict[str, Any], task: str, batch: int, half_activations: bool, checkpointing: bool = False
) -> dict[str, int]:
    """Return `{"parameters", "states", "activations", "total"}` in bytes for one optimiser step.

    States are fp32 weights, gradients and two AdamW moments; activations follow the
    transformer estimate of Korthikanti et al. (34·T·D per layer and sample in 16-bit, plus
    5·heads·T² for explicit attention scores) and the fp32 logits of both heads with their gradients.
    With activation `checkpointing` only each block's fp32 input is kept, plus one block recomputed.
    """
    params = parameter_count(config, task)
    T, d, heads = sequence_length(config, task), config["d_model"], config.get("n_heads", 1)
    width = 1 if half_activations else 2
    scores = 5 * heads * T * T if config.get("attention") == "naive" else 0  # fused attention keeps no T×T scores
    block = (34 * T * d + scores) * width
    per_sample = config["n_layers"] * 4 * T * d + block if checkpointing else config["n_layers"] * block
    vocab = config["text_rows"] + (config.get("codebook_size", 0) + 2 if task == "tts" else 0)
    logits = T * vocab * 4 * 2
    activations = batch * (per_sample + logits)
    states = params * 4 * 4
    return {"parameters": params, "states": states, "activations": activations, "total": states + activations}


def free_bytes(device: str) -> int | None:
    """Return the free memory of `device` (CUDA: free device memory; CPU: MemAvailable), or None if unknown."""
    if device.startswith("cuda") and torch.cuda.is_available():
        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    meminfo = Path("/proc/meminfo")
    if meminfo.is_file():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return None


def largest_fitting_batch(
    config: dict[str, Any], task: str, half: bool, budget: int, upper: int, checkpointing: bool = False
) -> int:
    """Return the largest batch size ≤ `upper` whose estimate fits `budget` bytes (0 when none does)."""
    one = estimate_bytes(config, task, 1, half, checkpointing)
    if one["total"] > budget:
        return 0
    return min(upper, (budget - one["states"]) // max(one["activations"], 1))


def micro_batch_plan(effective: int, largest: int) -> tuple[int, int]:
    """Return (batch.size, batch.accumulate) with the largest micro-batch ≤ `largest` that divides
    the `effective` batch exactly, so the optimisation does not change."""
    size = max(d for d in range(1, min(effective, max(largest, 1)) + 1) if effective % d == 0)
    return size, effective // size

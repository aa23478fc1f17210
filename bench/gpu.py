"""GPU benchmark: the trainer's step and generation on one GPU, as the table of issue 15.

Rows (own models on the espeak sample, real text + speech tokens, the trainer's own step —
prefetching input pipeline, device-side metrics, fused AdamW, `torch.compile` per `compile: auto`):
- `base` (d512 × 8) and the 491M shape (d1280 × 24, IndexTTS2's GPT) in bf16 and fp32, batch 32:
  tokens/s, step ms, peak memory, MFU = 6 × parameters × tokens/s ÷ the GPU's peak dense bf16
  TFLOP/s (989 for H100/H200; `--peak-tflops` for another device);
- generation with the `base` model, 250 codes (4 s of audio) with and without the KV cache: RTF;
- the family rows (Chatterbox T3, IndexTTS2 UnifiedVoice: their training step beside a plain loop)
  from `bench/families.py` when it exists and provides `rows(device, smoke) -> list[dict]`; otherwise
  the report says they were skipped and why.

    .venv/bin/python bench/gpu.py --output gpu.json          # on a GPU machine, about 5 minutes
    .venv/bin/python bench/gpu.py --smoke --output smoke.json # reduced shapes on the CPU, seconds

`--smoke` runs reduced shapes (d64 × 2 and d96 × 3), batch 4, two steps and 20 codes, so the whole
path is exercised on a CPU; its numbers say nothing about a GPU.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from bench import families as bench_families  # noqa: E402
from bench.common import peak_tflops  # noqa: E402
from core.config import load_settings  # noqa: E402
from core.data.sample import sample_dataset  # noqa: E402
from core.data.sample_text import AMHARIC_SENTENCES, ENGLISH_SENTENCES  # noqa: E402
from core.fsutil import atomic_write_text  # noqa: E402
from core.data.codec_training import train_codec  # noqa: E402
from core.tokenizers.train import train_tokenizer  # noqa: E402
from core.training.data import Prefetcher  # noqa: E402
from core.training.run_config import run_config_from_dict  # noqa: E402
from core.recipe import prepare_trainer  # noqa: E402
from models.registry import MODEL_SIZES, model_config  # noqa: E402
from models.tts import GPTTTS  # noqa: E402

FULL = {
    "shapes": {"base": dict(MODEL_SIZES["base"]),
               "d1280x24": {"d_model": 1280, "n_layers": 24, "n_heads": 20, "max_text_tokens": 400}},
    "batch": 32, "warmup": 3, "steps": 20, "per_language": 48, "codes": 250, "codebook": 256,
}
SMOKE = {
    "shapes": {"base": {"d_model": 64, "n_layers": 2, "n_heads": 4, "max_text_tokens": 128},
               "d1280x24": {"d_model": 96, "n_layers": 3, "n_heads": 4, "max_text_tokens": 128}},
    "batch": 4, "warmup": 1, "steps": 1, "per_language": 3, "codes": 20, "codebook": 32,
}
PRECISIONS = ("bf16", "fp32")
CODES_PER_SECOND = 62.5  # the codec's frame rate at 16 kHz, hop 256


def device_name(device: torch.device) -> str:
    """Return the GPU's name, or the CPU's model name."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").is_file() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip() + f" ({os.cpu_count()} CPUs)"
    return platform.processor() or "cpu"


def sync(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device: torch.device) -> None:
    """Start a fresh peak-memory measurement."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def peak_gib(device: torch.device) -> float:
    """Return the peak memory since `reset_peak`: allocated GPU memory, or the process's peak RSS on the CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 1024**3
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2


def prepare(root: Path, per_language: int, codebook: int) -> None:
    """Render the espeak sample (en + am) into `root`, train a codec and a 600-piece tokenizer on it."""
    manifest = sample_dataset(root / "datasets" / "sample", 16000, ["en", "am"], per_language).manifest
    train_codec(manifest, codebook_size=codebook, iterations=10).save(root / "codecs" / "codec.pt")
    train_tokenizer(list(ENGLISH_SENTENCES) + list(AMHARIC_SENTENCES), "sentencepiece", 600,
                    root / "tokenizers" / "en_am.model")


def train_row(name: str, shape: dict[str, Any], precision: str, plan: dict[str, Any], peak: float | None) -> dict[str, Any]:
    """Return one training row: the trainer's step on the espeak sample for `shape` in `precision`."""
    config = run_config_from_dict({
        "preset": "tiny", "name": f"gpu-{name}-{precision}", "tokenizer": "tokenizers/en_am.model",
        "codec": "codecs/codec.pt", "data": {"manifest": "datasets/sample/manifest.jsonl", "val_ratio": 0.1},
        "model": {**shape, "max_speech_tokens": 800}, "batch": {"size": plan["batch"]}, "precision": precision,
        "freeze": {"mode": "none"}, "optim": {"warmup_steps": 1},
        "schedule": {"max_steps": 10_000, "val_every": 10_000, "save_every": 10_000, "log_every": 10_000},
    }, source=f"bench/gpu.py {name}")
    trainer = prepare_trainer(config, settings=load_settings())
    device = trainer.device
    batches = Prefetcher(trainer.batcher, trainer.data.train, trainer.data.collate, device, config.data.prefetch)
    try:
        for _ in range(plan["warmup"]):  # compilation and allocator warm-up
            trainer._train_step(batches)
        sync(device)
        reset_peak(device)
        tokens, start = 0, time.perf_counter()
        for _ in range(plan["steps"]):
            tokens += trainer._train_step(batches)[1]
        sync(device)
        elapsed = time.perf_counter() - start
    finally:
        batches.close()
    params = sum(p.numel() for p in trainer.model.parameters())
    tokens_per_s = tokens / elapsed
    row = {
        "model": name, "shape": f"d{shape['d_model']} x {shape['n_layers']}", "parameters": params,
        "precision": precision, "batch": plan["batch"], "compile": trainer.compiled, "steps": plan["steps"],
        "step_ms": round(1000 * elapsed / plan["steps"], 2), "tokens_per_s": round(tokens_per_s, 1),
        "peak_memory_gib": round(peak_gib(device), 3),
        "mfu": round(6 * params * tokens_per_s / (peak * 1e12), 6) if peak else None,
    }
    del trainer, batches
    reset_peak(device)
    return row


def generation_rows(device: torch.device, codes: int, smoke: bool) -> list[dict[str, Any]]:
    """Return the generation rows: the base model (smoke: the reduced base) with and without the KV cache."""
    torch.manual_seed(0)
    shape = {**(SMOKE if smoke else FULL)["shapes"]["base"], "max_speech_tokens": max(codes, 800)}
    model = GPTTTS(model_config("tts", shape, text_rows=12000, codebook_size=1024, n_mels=80)).to(device).eval()
    with torch.no_grad():
        model.mel_head.bias[model.config.stop_speech] = -1e4  # every run generates exactly `codes` codes
    text, reference = list(range(2, 22)), torch.randn(120, 80)
    audio_seconds = codes / CODES_PER_SECOND
    rows = []
    for use_cache in (True, False):
        model.generate(text, reference, temperature=0, max_codes=min(codes, 8), use_cache=use_cache)  # warm-up
        best = float("inf")
        for _ in range(2):
            sync(device)
            start = time.perf_counter()
            out = model.generate(text, reference, temperature=0, max_codes=codes, use_cache=use_cache)
            sync(device)
            best = min(best, time.perf_counter() - start)
            assert len(out) == codes
        rows.append({"model": "base", "kv_cache": use_cache, "codes": codes, "audio_seconds": round(audio_seconds, 3),
                     "seconds": round(best, 4), "rtf": round(best / audio_seconds, 5)})
    rows[0]["speedup_vs_no_cache"] = round(rows[1]["seconds"] / rows[0]["seconds"], 2)
    return rows


def refused_or_row(name: str, shape: dict[str, Any], precision: str, plan: dict[str, Any], peak: float | None,
                   partial: Path | None) -> dict[str, Any]:
    """Return `train_row`, or, when the doctor's memory plan refuses the batch on this device, the row at half
    the batch with the refusal noted; written to `partial` (JSON lines) as soon as it is known."""
    from core.checks.doctor import DoctorRefused

    try:
        row = train_row(name, shape, precision, plan, peak)
    except DoctorRefused as exc:
        half = {**plan, "batch": plan["batch"] // 2}
        row = {**train_row(name, shape, precision, half, peak), "note": f"batch {plan['batch']} refused: {exc}"}
    if partial is not None:
        with partial.open("a", encoding="utf-8") as out:
            out.write(json.dumps(row) + "\n")
    return row


def run(smoke: bool, device: torch.device, peak_override: float | None, steps: int | None,
        with_families: bool = True, partial: Path | None = None,
        only: set[tuple[str, str]] | None = None) -> dict[str, Any]:
    """Run the benchmark in a fresh workspace and return the report (the family rows unless `with_families` is off);
    each training row is also appended to `partial` as it finishes. `only` names the (shape, precision) training
    rows to run (default: all)."""
    plan = dict(SMOKE if smoke else FULL)
    if steps:
        plan["steps"] = steps
    peak = peak_tflops(device, peak_override)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="lf-bench-gpu-") as tmp:
        os.environ["LINGUAFORGE_WORKSPACE"] = tmp
        prepare(Path(tmp), plan["per_language"], plan["codebook"])
        prepared = time.perf_counter() - started
        training = [refused_or_row(name, shape, precision, plan, peak, partial)
                    for name, shape in plan["shapes"].items() for precision in PRECISIONS
                    if only is None or (name, precision) in only]
    generation = generation_rows(device, plan["codes"], smoke)
    families, note = ((bench_families.rows(device, smoke), None) if with_families
                      else ([], "family rows skipped (--skip-families)."))
    for row in families:
        if peak and row.get("parameters") and row.get("tokens_per_s") and row.get("mfu") is None:
            row["mfu"] = round(6 * row["parameters"] * row["tokens_per_s"] / (peak * 1e12), 6)
    by_key = {(r["model"], r["precision"]): r for r in training}
    bf16, fp32 = by_key.get(("base", "bf16")), by_key.get(("base", "fp32"))
    ratio = round(bf16["tokens_per_s"] / fp32["tokens_per_s"], 3) if bf16 and fp32 else None
    return {
        "device": device_name(device), "device_type": device.type, "smoke": smoke,
        "peak_bf16_tflops": peak, "torch": torch.__version__, "python": platform.python_version(),
        "training": training, "bf16_over_fp32_base": ratio,
        "generation": generation, "families": families, "families_note": note,
        "seconds": {"prepare": round(prepared, 1), "total": round(time.perf_counter() - started, 1)},
    }


def render(report: dict[str, Any]) -> str:
    """Return the report as the issue's table (markdown)."""
    lines = [f"device: {report['device']}" + (" (smoke run: reduced shapes)" if report["smoke"] else ""),
             "", "| model | precision | batch | compile | step ms | tokens/s | peak GiB | MFU |", "|---|---|---|---|---|---|---|---|"]
    for r in report["training"]:
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "-"
        lines.append(f"| {r['model']} ({r['shape']}, {r['parameters'] / 1e6:.1f}M) | {r['precision']} | {r['batch']} | "
                     f"{r['compile']} | {r['step_ms']} | {r['tokens_per_s']:,.0f} | {r['peak_memory_gib']} | {mfu} |")
        if r.get("note"):
            lines.append(f"| ↳ {r['note']} | | | | | | | |")
    for r in report["families"]:
        mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") is not None else "-"
        lines.append(f"| {r.get('model')} | {r.get('precision', '-')} | {r.get('batch', '-')} | {r.get('compile', '-')} | "
                     f"{r.get('step_ms', '-')} | {r.get('tokens_per_s', '-')} | {r.get('peak_memory_gib', '-')} | {mfu} |")
    if report["bf16_over_fp32_base"]:
        lines += ["", f"bf16 / fp32 tokens/s at base: {report['bf16_over_fp32_base']}x"]
    lines += ["", "| generation | codes | seconds | RTF |", "|---|---|---|---|"]
    for r in report["generation"]:
        lines.append(f"| {r['model']}, {'KV cache' if r['kv_cache'] else 'no cache'} | {r['codes']} | {r['seconds']} | {r['rtf']} |")
    if report["families_note"]:
        lines += ["", report["families_note"]]
    return "\n".join(lines)


def main() -> None:
    """Parse options, run the benchmark, print the table (or JSON) and write `--output`."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="reduced shapes and steps, for a CPU (seconds)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="default: CUDA when present")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per training row (default 20; smoke 1)")
    parser.add_argument("--peak-tflops", type=float, default=None, help="peak bf16 TFLOP/s for MFU (default: by GPU name)")
    parser.add_argument("--skip-families", action="store_true", help="leave out bench/families.py's rows")
    parser.add_argument("--output", default=None, help="also write the report as JSON to this file")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument("--rows", nargs="+", metavar="SHAPE:PRECISION", default=None,
                        help=f"only these training rows, e.g. d1280x24:fp32 (shapes: {', '.join(FULL['shapes'])}; "
                             "precisions: bf16, fp32)")
    args = parser.parse_args()
    from core.errors import InputError
    from core.inference import resolve_device

    try:
        device = resolve_device(args.device)
    except InputError as exc:
        sys.exit(f"bench/gpu.py: {exc}")
    only = {tuple(row.partition(":")[::2]) for row in args.rows} if args.rows else None
    unknown = sorted(f"{name}:{precision}" for name, precision in only or ()
                     if name not in FULL["shapes"] or precision not in PRECISIONS)
    if unknown:
        parser.error(f"--rows {' '.join(unknown)}: give SHAPE:PRECISION with a shape of "
                     f"{', '.join(FULL['shapes'])} and a precision of bf16 or fp32")
    if args.smoke:
        torch.set_num_threads(1)
    partial = Path(args.output).with_suffix(".rows.jsonl") if args.output else None
    report = run(args.smoke, device, args.peak_tflops, args.steps, not args.skip_families, partial, only)
    if args.output:
        atomic_write_text(Path(args.output), json.dumps(report, indent=2) + "\n")
    print(json.dumps(report) if args.json else render(report))


if __name__ == "__main__":
    main()

"""Full fine-tune vs base rows frozen vs LoRA vs LoRA + base-language replay, on the CPU (issue 27).

The own model's TTS quickstart data (the espeak sample, `bench/train.py`'s `prepare`): a tiny model
trained on English, extended to the English+Amharic tokenizer (fvt rows), then fine-tuned on Amharic
four ways. Each variant runs in its own process (so its peak memory is its own) and reports: trainable
parameters, checkpoint size (the step checkpoint: weights + AdamW state; and its weights alone), the
training state (weights, gradients and AdamW moments, counted from the model), the peak resident memory
of the process (mostly Python, torch and the data), median step time, the Amharic validation loss at the end, and the
English validation loss (the same held-out English clips for every variant) at the start and the end.

    .venv/bin/python bench/adapters.py --base-steps 200 --steps 100 --markdown
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from bench import train as bench_train  # noqa: E402
from core.checkpoint import load_checkpoint  # noqa: E402
from core.config import load_settings  # noqa: E402
from core.recipe import prepare_trainer, train  # noqa: E402
from core.training.adapter import export_merged  # noqa: E402
from core.training.embeddings import extend_checkpoint  # noqa: E402

prepare, run_config = bench_train.prepare, bench_train.run_config

LORA = {"kind": "lora", "rank": 8, "alpha": 16.0, "dropout": 0.0}
VARIANTS = {
    "full fine-tune": {"freeze": {"mode": "none"}},
    "base rows frozen": {"freeze": {"mode": "base-rows"}},
    "LoRA r8": {"freeze": {"mode": "base-rows"}, "adapter": LORA},
    "LoRA r8 + replay 25%": {"freeze": {"mode": "base-rows"}, "adapter": LORA},
}
OPTIM = {"lr": 2.0e-3, "warmup_steps": 10}


def english_val_loss(checkpoint: Path) -> dict[str, float]:
    """Return the validation metrics of `checkpoint` on the English clips' val split (en+am tokenizer)."""
    config = run_config("en-val", "datasets/sample/en.jsonl", "tokenizers/en_am.model", 1, "tiny",
                        base_checkpoint=str(checkpoint), freeze={"mode": "none"})
    return prepare_trainer(config, settings=load_settings()).validate()


def run_variant(name: str, steps: int) -> dict:
    """Fine-tune one variant on Amharic (in this process) and return its figures."""
    settings = load_settings()
    extra = json.loads(json.dumps(VARIANTS[name]))
    data = {"manifest": "datasets/sample/am.jsonl", "val_ratio": 0.2}
    if "replay" in name:
        data["replay"] = {"manifest": "datasets/sample/en.jsonl", "share": 0.25}
    slug = "".join(c if c.isalnum() else "-" for c in name.lower())
    config = run_config(f"ft-{slug}", "datasets/sample/am.jsonl", "tokenizers/en_am.model", steps, "tiny",
                        base_checkpoint="checkpoints/en_am.pt", data=data, optim=OPTIM,
                        schedule={"max_steps": steps, "val_every": steps, "save_every": steps, "log_every": 1}, **extra)
    trainer = prepare_trainer(config, settings=settings)
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    # fp32 weights and buffers, plus a gradient and two AdamW moments per trainable parameter
    state_bytes = sum(t.numel() * t.element_size() for t in trainer.model.state_dict().values()) + 3 * 4 * trainable
    result = trainer.run()
    checkpoint = Path(result.last_checkpoint)
    saved = load_checkpoint(checkpoint)
    weights_bytes = sum(t.numel() * t.element_size() for t in saved.state_dict.values())
    rows = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    times = [r["time"] for r in rows if r["split"] == "train"]
    full = checkpoint
    if saved.meta.get("adapter"):
        full = export_merged(checkpoint, result.run_dir / "merged", None, settings)[0]
    return {
        "variant": name, "trainable_parameters": trainable, "checkpoint_bytes": checkpoint.stat().st_size,
        "weights_bytes": weights_bytes, "step_s": statistics.median(b - a for a, b in zip(times, times[1:])),
        "val_am_loss": result.val.get("loss"), "val_en_loss_end": english_val_loss(full).get("loss"),
        "training_state_mib": state_bytes / 2**20, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "replay": result.info.get("replay"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-steps", type=int, default=200)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--per-language", type=int, default=48)
    parser.add_argument("--markdown", action="store_true", help="print the docs/benchmarks.md table")
    parser.add_argument("--variant", help=argparse.SUPPRESS)  # child process: one variant in a prepared workspace
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.variant:
        print(json.dumps(run_variant(args.variant, args.steps)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "workspace"
        os.environ["LINGUAFORGE_WORKSPACE"] = str(root)
        prepare(root, args.per_language)
        settings = load_settings()
        base = train(run_config("en-base", "datasets/sample/en.jsonl", "tokenizers/en.model", args.base_steps, "tiny",
                                optim=OPTIM), settings=settings)
        extend_checkpoint(base.last_checkpoint, settings.resolve("tokenizers/en.model"),
                          settings.resolve("tokenizers/en_am.model"), settings.resolve("checkpoints/en_am.pt"), init="fvt")
        start = english_val_loss(settings.resolve("checkpoints/en_am.pt")).get("loss")
        results = []
        for name in VARIANTS:
            child = subprocess.run([sys.executable, __file__, "--variant", name, "--steps", str(args.steps)],
                                   capture_output=True, text=True, env=dict(os.environ))
            if child.returncode:
                raise SystemExit(f"variant {name} failed:\n{child.stderr[-3000:]}")
            row = json.loads(child.stdout.strip().splitlines()[-1])
            row["val_en_loss_start"] = start
            results.append(row)
    report = {"machine": f"{platform.machine()} {os.cpu_count()} CPUs, torch {torch.__version__}",
              "base_steps": args.base_steps, "steps": args.steps, "per_language": args.per_language, "results": results}
    if not args.markdown:
        print(json.dumps(report, indent=1))
        return
    print(f"{report['machine']}; English base {args.base_steps} steps, Amharic fine-tune {args.steps} steps, batch 8, tiny model\n")
    print("| variant | trainable params | checkpoint (weights + AdamW) | weights only | weights + grads + AdamW | peak RSS (process) | step | Amharic val loss "
          "| English val loss start → end (change) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        change = r["val_en_loss_end"] - r["val_en_loss_start"]
        print(f"| {r['variant']} | {r['trainable_parameters']:,} | {r['checkpoint_bytes'] / 2**20:.2f} MiB "
              f"| {r['weights_bytes'] / 2**20:.2f} MiB "
              f"| {r['training_state_mib']:.2f} MiB | {r['peak_rss_mib']:.0f} MiB | {r['step_s'] * 1000:.0f} ms "
              f"| {r['val_am_loss']:.3f} | {r['val_en_loss_start']:.3f} → {r['val_en_loss_end']:.3f} ({change:+.3f}) |")


if __name__ == "__main__":
    main()

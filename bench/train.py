"""Training benchmarks on the espeak sample (real speech, real codec and tokenizers).

Throughput: tokens/s (real tokens, padding excluded) of the trainer's step — length-bucketed
batches, fused `scaled_dot_product_attention` — beside a straightforward reference loop
(random batches, explicit softmax attention) on the same data and model size, in the same run,
for the `tiny` and `base` model sizes.

Convergence (`--convergence`): a tiny model trained on English, extended to the English+Amharic
tokenizer with `fvt`, `mean` and `normal` (random) new rows, then fine-tuned on Amharic with
frozen base rows; reports Amharic validation `mel_loss` and `text_loss` after a fixed number of steps.

    .venv/bin/python bench/train.py --steps 20 --convergence --json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from core.speech.codec import train_codec  # noqa: E402
from core.config import load_settings  # noqa: E402
from core.data.sample import sample_dataset  # noqa: E402
from core.training.embeddings import extend_checkpoint  # noqa: E402
from core.training.run_config import run_config_from_dict  # noqa: E402
from core.data.sample_text import AMHARIC_SENTENCES, ENGLISH_SENTENCES  # noqa: E402
from core.tokenizers.sp_extend import extend_sentencepiece  # noqa: E402
from core.tokenizers.train import train_tokenizer  # noqa: E402
from core.training.data import Batcher, Prefetcher  # noqa: E402
from core.training.trainer import Trainer, train  # noqa: E402
from models.registry import build_model  # noqa: E402


def prepare(root: Path, per_language: int) -> None:
    """Render the espeak sample into `root`, split it by language, train a codec and the tokenizers."""
    manifest = sample_dataset(root / "datasets" / "sample", 16000, ["en", "am"], per_language).manifest
    for language in ("en", "am"):
        rows = [line for line in manifest.read_text().splitlines() if json.loads(line)["language"] == language]
        (manifest.parent / f"{language}.jsonl").write_text("\n".join(rows) + "\n")
    train_codec(manifest, codebook_size=256, iterations=30).save(root / "codecs" / "c256.pt")
    train_tokenizer(list(ENGLISH_SENTENCES), "sentencepiece", 300, root / "tokenizers" / "en.model")
    extend_sentencepiece(root / "tokenizers" / "en.model", list(AMHARIC_SENTENCES), 600,
                         root / "tokenizers" / "en_am.model", protect_lines=list(ENGLISH_SENTENCES))


def run_config(name: str, manifest: str, tokenizer: str, steps: int, size: str, **extra):  # noqa: ANN003, ANN201
    """Return a RunConfig for the espeak sample (batch 8, one validation at the end)."""
    return run_config_from_dict({
        "preset": "tiny", "name": name, "tokenizer": tokenizer, "codec": "codecs/c256.pt",
        "data": {"manifest": manifest, "val_ratio": 0.2},
        "model": {"preset": size, "max_speech_tokens": 800},
        "batch": {"size": 8}, "precision": "fp32",
        "schedule": {"max_steps": steps, "val_every": steps, "save_every": steps, "log_every": steps},
        **extra,
    })


def reference_tokens_per_s(trainer: Trainer, steps: int) -> float:
    """Return tokens/s of a plain loop: random (unbucketed) batches, explicit softmax attention."""
    torch.manual_seed(0)
    config = trainer.model_cfg.__class__(**{**trainer.model_cfg.to_dict(), "attention": "naive"})
    model = build_model("tts", config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    batches = iter(Batcher(trainer.data.train.lengths, trainer.config.batch.size, seed=0, bucket=False))
    tokens, start = 0, 0.0
    for step in range(steps + 1):
        if step == 1:  # the first step warms up allocators and kernels
            tokens, start = 0, time.perf_counter()
        batch = trainer.data.collate([trainer.data.train.load(i) for i in next(batches)])
        batch.pop("n_tokens")
        out = trainer.data.forward(model, batch)
        out["loss"].backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        tokens += int(out["tokens"])
    return tokens / (time.perf_counter() - start)


def trainer_tokens_per_s(trainer: Trainer, steps: int) -> float:
    """Return tokens/s of the trainer's own step (prefetched bucketed batches, fused attention)."""
    batches = Prefetcher(trainer.batcher, trainer.data.train, trainer.data.collate, trainer.device,
                         trainer.config.data.prefetch)
    try:
        trainer._train_step(batches)  # warm-up step
        tokens, start = 0, time.perf_counter()
        for _ in range(steps):
            tokens += trainer._train_step(batches)[1]
        return tokens / (time.perf_counter() - start)
    finally:
        batches.close()


def throughput(steps: int) -> list[dict]:
    """Return one row per model size: trainer vs reference tokens/s and the padding shares."""
    rows = []
    for size, size_steps in (("tiny", steps), ("base", max(2, steps // 4))):
        trainer = Trainer(run_config(f"tp-{size}", "datasets/sample/manifest.jsonl", "tokenizers/en_am.model", 1, size),
                          settings=load_settings())
        ours = trainer_tokens_per_s(trainer, size_steps)
        reference = reference_tokens_per_s(trainer, size_steps)
        unbucketed = Batcher(trainer.data.train.lengths, trainer.config.batch.size, 0, bucket=False)
        rows.append({
            "model": size, "steps": size_steps, "parameters": sum(p.numel() for p in trainer.model.parameters()),
            "trainer_tokens_per_s": round(ours, 1), "reference_tokens_per_s": round(reference, 1),
            "speedup": round(ours / reference, 2),
            "padding_bucketed": round(trainer.batcher.padding_share(), 3),
            "padding_random": round(unbucketed.padding_share(), 3),
        })
    return rows


def convergence(base_steps: int, finetune_steps: int) -> dict:
    """Return Amharic val losses after fine-tuning from fvt / mean / normal new rows."""
    settings = load_settings()
    base = train(run_config("conv-en", "datasets/sample/en.jsonl", "tokenizers/en.model", base_steps, "tiny",
                            optim={"lr": 2.0e-3, "warmup_steps": 10}), settings=settings)
    results = {"base_steps": base_steps, "finetune_steps": finetune_steps, "base_val": base.val, "init": {}}
    for init in ("fvt", "mean", "normal"):
        path = settings.resolve(f"checkpoints/en_am_{init}.pt")
        report = extend_checkpoint(base.last_checkpoint, settings.resolve("tokenizers/en.model"),
                                   settings.resolve("tokenizers/en_am.model"), path, init=init)
        config = run_config(f"conv-am-{init}", "datasets/sample/am.jsonl", "tokenizers/en_am.model", finetune_steps,
                            "tiny", preset="new-language", base_checkpoint=str(path), optim={"lr": 2.0e-3, "warmup_steps": 10})
        config.schedule.val_every = max(1, finetune_steps // 4)
        fine = train(config, settings=settings)
        rows = [json.loads(line) for line in (fine.run_dir / "metrics.jsonl").read_text().splitlines()]
        results["init"][init] = {
            "rows_made": report["init"],
            "val_mel_loss_curve": {r["step"]: round(r["mel_loss"], 4) for r in rows if r["split"] == "val"},
            "val_text_loss_curve": {r["step"]: round(r["text_loss"], 4) for r in rows if r["split"] == "val"},
            "train_at_end": {k: round(v, 4) for k, v in [r for r in rows if r["split"] == "train"][-1].items()
                             if k in ("text_loss", "mel_loss")},
        }
    return results


def main() -> None:
    """Parse options, run the benchmarks in a fresh workspace and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20, help="timed steps for the tiny model (base: a quarter)")
    parser.add_argument("--per-language", type=int, default=24, help="espeak clips per language")
    parser.add_argument("--convergence", action="store_true", help="also run the fvt/mean/normal convergence study")
    parser.add_argument("--no-throughput", action="store_true", help="skip the throughput comparison")
    parser.add_argument("--base-steps", type=int, default=200)
    parser.add_argument("--finetune-steps", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="lf-bench-train-") as tmp:
        os.environ["LINGUAFORGE_WORKSPACE"] = tmp
        root = Path(tmp)
        prepare(root, args.per_language)
        report = {"machine": {"python": platform.python_version(), "torch": torch.__version__, "threads": args.threads,
                              "cpus": os.cpu_count(), "load": os.getloadavg()[0]},
                  "throughput": None if args.no_throughput else throughput(args.steps)}
        if args.convergence:
            report["convergence"] = convergence(args.base_steps, args.finetune_steps)
    print(json.dumps(report, indent=None if args.json else 2))


if __name__ == "__main__":
    main()

"""Training benchmarks on the espeak sample (real speech, real codec and tokenizers).

Throughput: tokens/s (real tokens, padding excluded) of the trainer's step — length-bucketed
batches, fused `scaled_dot_product_attention` — beside a straightforward reference loop
(random batches, explicit softmax attention) on the same data and model size, in the same run,
for the `tiny` and `base` model sizes.

Convergence (`--convergence`): a tiny model trained on English, extended to the English+Amharic
tokenizer with `translit`, `fvt`, `mean` and `normal` (random) new rows, then fine-tuned on the
Amharic sample (`--per-language-am`, 348 = every built-in sentence, voices alternating) with frozen
base rows, once per seed; reports Amharic validation `text_loss` / `mel_loss` at `--report-steps`
for each init: per seed, mean and spread (max - min). `--out FILE` keeps the results written so far.

    .venv/bin/python bench/train.py --steps 20 --convergence --json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from core.data.codec_training import train_codec  # noqa: E402
from core.config import load_settings  # noqa: E402
from core.data.sample import sample_dataset  # noqa: E402
from core.training.embeddings import extend_checkpoint  # noqa: E402
from core.training.run_config import run_config_from_dict  # noqa: E402
from core.data.sample_text import AMHARIC_SENTENCES, ENGLISH_SENTENCES  # noqa: E402
from core.families.contract import weighted_loss  # noqa: E402
from core.tokenizers.sp_extend import extend_sentencepiece  # noqa: E402
from core.tokenizers.train import train_tokenizer  # noqa: E402
from core.training.data import Batcher, Prefetcher  # noqa: E402
from core.recipe import prepare_trainer, train  # noqa: E402
from models.registry import build_model  # noqa: E402


def prepare(root: Path, per_language: int, per_language_am: int | None = None) -> None:
    """Render the espeak sample into `root`, split it by language, train a codec and the tokenizers."""
    data = root / "datasets"
    summaries = [sample_dataset(data / "sample_en", 16000, ["en"], per_language).manifest,
                 sample_dataset(data / "sample_am", 16000, ["am"], per_language_am or per_language).manifest]
    (data / "sample").mkdir(parents=True, exist_ok=True)
    for language, manifest in zip(("en", "am"), summaries):
        rows = [json.loads(line) for line in manifest.read_text().splitlines()]
        for row in rows:
            row["audio"] = str((manifest.parent / row["audio"]).resolve())
        (data / "sample" / f"{language}.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    both = (data / "sample" / "en.jsonl").read_text() + (data / "sample" / "am.jsonl").read_text()
    (data / "sample" / "manifest.jsonl").write_text(both)
    train_codec(data / "sample" / "manifest.jsonl", codebook_size=256, iterations=30).save(root / "codecs" / "c256.pt")
    train_tokenizer(list(ENGLISH_SENTENCES), "sentencepiece", 300, root / "tokenizers" / "en.model")
    extend_sentencepiece(root / "tokenizers" / "en.model", list(AMHARIC_SENTENCES), 1000,
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
        n_tokens = batch.pop("n_tokens")
        weighted_loss(trainer.data.forward(model, batch), trainer.data.loss_weights).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        tokens += n_tokens
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
        trainer = prepare_trainer(run_config(f"tp-{size}", "datasets/sample/manifest.jsonl", "tokenizers/en_am.model", 1, size),
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


def _val_at(rows: list[dict], metric: str, steps: list[int]) -> dict[int, float | None]:
    val = {r["step"]: r[metric] for r in rows if r["split"] == "val"}
    return {step: round(val[step], 4) if step in val else None for step in steps}


def summarize(per_seed: dict[int, dict], steps: list[int]) -> dict:
    """Return {metric: {step: {"mean", "spread"}}} over the seeds (spread = max - min)."""
    summary: dict = {}
    for metric in ("text_loss", "mel_loss"):
        summary[metric] = {}
        for step in steps:
            values = [run[metric][step] for run in per_seed.values() if run[metric][step] is not None]
            summary[metric][step] = ({"mean": round(sum(values) / len(values), 4),
                                      "spread": round(max(values) - min(values), 4), "n": len(values)}
                                     if values else None)
    return summary


def convergence(base_steps: int, finetune_steps: int, inits: list[str], seeds: list[int], steps: list[int],
                out: Path | None = None) -> dict:
    """Return Amharic val text/mel losses at `steps` after fine-tuning from each init, per seed and summarized."""
    settings = load_settings()
    base = train(run_config("conv-en", "datasets/sample/en.jsonl", "tokenizers/en.model", base_steps, "tiny",
                            optim={"lr": 2.0e-3, "warmup_steps": 10}), settings=settings)
    results = {"base_steps": base_steps, "finetune_steps": finetune_steps, "base_val": base.val,
               "seeds": seeds, "report_steps": steps, "init": {}}
    val_every = math.gcd(*steps)
    for seed in seeds:  # seed-major, so a cut-short run still covers every init
        for init in inits:
            entry = results["init"].setdefault(init, {"per_seed": {}})
            path = settings.resolve(f"checkpoints/en_am_{init}_{seed}.pt")
            report = extend_checkpoint(base.last_checkpoint, settings.resolve("tokenizers/en.model"),
                                       settings.resolve("tokenizers/en_am.model"), path, init=init, seed=seed)
            entry["rows_made"] = {m: n for m, n in report["init"].items() if n}
            config = run_config(f"conv-am-{init}-{seed}", "datasets/sample/am.jsonl", "tokenizers/en_am.model",
                                finetune_steps, "tiny", preset="new-language", base_checkpoint=str(path), seed=seed,
                                optim={"lr": 2.0e-3, "warmup_steps": 10})
            config.schedule.val_every = val_every
            fine = train(config, settings=settings)
            rows = [json.loads(line) for line in (fine.run_dir / "metrics.jsonl").read_text().splitlines()]
            entry["per_seed"][seed] = {"text_loss": _val_at(rows, "text_loss", steps),
                                       "mel_loss": _val_at(rows, "mel_loss", steps)}
            entry["summary"] = summarize(entry["per_seed"], steps)
            if out is not None:
                out.write_text(json.dumps(results, indent=1))
    return results


def main() -> None:
    """Parse options, run the benchmarks in a fresh workspace and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20, help="timed steps for the tiny model (base: a quarter)")
    parser.add_argument("--per-language", type=int, default=24, help="espeak clips per language")
    parser.add_argument("--convergence", action="store_true", help="also run the fvt/mean/normal convergence study")
    parser.add_argument("--no-throughput", action="store_true", help="skip the throughput comparison")
    parser.add_argument("--base-steps", type=int, default=200)
    parser.add_argument("--finetune-steps", type=int, default=400)
    parser.add_argument("--per-language-am", type=int, default=None, help="Amharic clips (348: every sentence)")
    parser.add_argument("--inits", default="translit,fvt,normal", help="mean = fvt when the base spells nothing")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--report-steps", default="50,100,200,400")
    parser.add_argument("--out", type=Path, help="write the convergence results here after every run")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="lf-bench-train-") as tmp:
        os.environ["LINGUAFORGE_WORKSPACE"] = tmp
        root = Path(tmp)
        prepare(root, args.per_language, args.per_language_am)
        report = {"machine": {"python": platform.python_version(), "torch": torch.__version__, "threads": args.threads,
                              "cpus": os.cpu_count(), "load": os.getloadavg()[0]},
                  "throughput": None if args.no_throughput else throughput(args.steps)}
        if args.convergence:
            report["convergence"] = convergence(
                args.base_steps, args.finetune_steps, args.inits.split(","),
                [int(x) for x in args.seeds.split(",")], [int(x) for x in args.report_steps.split(",")], args.out)
    print(json.dumps(report, indent=None if args.json else 2))


if __name__ == "__main__":
    main()

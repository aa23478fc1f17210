"""Keeping English: the same base, the same Amharic data and the same step budget under each retention strategy
(issue 45).

Starts from a finished (or far enough run) `quickstart tts` workspace — its English base checkpoint, the
English+Amharic tokenizer, the fvt-extended starting checkpoint, the codec, both languages' manifests and
held-out sentences — and fine-tunes Amharic from the same starting checkpoint once per strategy:

- `full`: every weight, the English text rows too;
- `frozen`: the English text rows frozen, everything else trained on Amharic alone (the old default);
- `replay10`, `replay25`, `replay50`: frozen, with 10/25/50 % of each batch English clips;
- `lora`, `lora+replay25`: LoRA (core.training.retention.LORA) on the backbone and the new rows, without and with
  25 % replay (merged with `export --merge` before it is measured);
- `staged`: the new text rows alone for the first quarter of the steps, then `frozen` for the rest.

Each fine-tune is measured the same way: the English and Amharic validation losses of the final model
(`validate`, the quickstart's validation splits), `eval tts` of its held-out Amharic and English sentences
(DTW identification against the codec's ceiling, MCD, failure flags; seed 0, the preset's temperature) and
the verdict on English (core.eval.quality.retention) against the English base checkpoint's own evaluation.
Time: the fine-tune's wall and CPU seconds (its process and children).

    LINGUAFORGE_WORKSPACE=W .venv/bin/python bench/retention.py --run NAME --json out.json --markdown
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import yaml
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from core.config import load_settings  # noqa: E402
from core.eval.quality.retention import retention_verdict  # noqa: E402
from core.training.retention import retention_overlay  # noqa: E402
from journeys.quickstart import write_run_config  # noqa: E402

STRATEGIES: dict[str, tuple[str, float | None]] = {  # bench name → (retention strategy, replay share)
    "full": ("full", None), "frozen": ("frozen", None), "replay10": ("replay", 0.10), "replay25": ("replay", 0.25),
    "replay50": ("replay", 0.50), "lora": ("lora", None), "lora+replay25": ("lora+replay", 0.25),
    "staged": ("frozen", None),
}
STAGED_FIRST_SHARE = 0.25  # `staged`: the share of the steps that trains the new rows alone


def core(*args: str, json_out: bool = True) -> tuple[dict[str, Any] | None, float, float]:
    """Run `python -m core ARGS` (with --json); return its JSON, wall seconds and CPU seconds (the child's own)."""
    command = [sys.executable, "-m", "core", *args, *(["--json"] if json_out else [])]
    started = time.time()
    process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(process.pid, 0)
    stdout, stderr = process.stdout.read(), process.stderr.read()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(args[:2])} failed: {stderr.strip()[-2000:]}")
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    return (json.loads(lines[-1]) if json_out and lines else None), time.time() - started, usage.ru_utime + usage.ru_stime


class Bench:
    """One quickstart run's inputs and the fine-tunes measured from them."""

    def __init__(self, run: str, steps: int | None, out: Path, speak: bool = True) -> None:
        self.settings = load_settings()
        self.speak = speak
        ws = self.settings.workspace
        self.run, self.out = run, out
        finetune = yaml.safe_load((ws / "runs" / run / "configs" / "am-finetune.yaml").read_text(encoding="utf-8"))
        finetune["data"].pop("replay", None)  # each strategy sets its own
        self.finetune = finetune
        self.steps = int(steps or finetune["schedule"]["max_steps"])
        data = ws / "datasets" / run
        self.manifests = {lang: str(data / "sample" / f"{lang}.jsonl") for lang in ("en", "am")}
        self.heldout = {lang: str(data / "text" / f"heldout_{lang}.txt") for lang in ("en", "am")}
        self.tokenizer, self.codec = finetune["tokenizer"], finetune["codec"]
        self.start = finetune["base_checkpoint"]
        self.base = str(sorted((ws / "runs" / f"{run}-en-base" / "checkpoints").glob("step_*.pt"))[-1])
        self.temperature = 0.5

    def config(self, name: str, manifest: str, checkpoint: str, steps: int, overlay: dict[str, Any]) -> str:
        """Write and return a run config: the quickstart's fine-tune settings with `steps`, `overlay` and `checkpoint`."""
        data = json.loads(json.dumps(self.finetune))
        data.update(name=name, base_checkpoint=checkpoint)
        data["data"] = {**data["data"], "manifest": manifest, **overlay.get("data", {})}
        data["freeze"] = {**overlay["freeze"], "until": "auto"}
        data.pop("adapter", None)
        if "adapter" in overlay:
            data["adapter"] = overlay["adapter"]
        data["schedule"] = {**data["schedule"], "max_steps": steps, "save_every": steps, "val_every": steps}
        return write_run_config(self.out / "configs" / f"{name}.yaml", data)

    def validate(self, checkpoint: str, lang: str, label: str) -> float:
        """Return the validation loss of `checkpoint` on `lang`'s validation split."""
        config = self.config(f"{label.replace('+', '-')}-val-{lang}", self.manifests[lang], checkpoint, 1,
                             {"freeze": {"mode": "none"}})
        result, _, _ = core("validate", "--config", config)
        return float(result["val"]["loss"])

    def evaluate(self, checkpoint: str, base_only: bool = False) -> dict[str, Any]:
        """Return `eval tts` of `checkpoint` on held-out Amharic and English sentences (English alone with `base_only`)."""
        args = ["eval", "tts", "--checkpoint", checkpoint, "--references", "espeak", "--no-wer",
                "--temperature", str(self.temperature), "--seed", "0"]
        if base_only:
            result, _, _ = core(*args, "--sentences", self.heldout["en"], "--language", "en")
            return result
        result, _, _ = core(*args, "--sentences", self.heldout["am"], "--language", "am",
                            "--base-sentences", self.heldout["en"], "--base-references", "espeak", "--base-language", "en")
        return result

    def train(self, label: str, overlay: dict[str, Any], checkpoint: str, steps: int) -> tuple[str, float, float | None]:
        """Fine-tune Amharic from `checkpoint` for `steps` with `overlay`; return the final full checkpoint, wall and CPU
        seconds. A strategy whose final checkpoint this bench folder already holds is measured again, not retrained
        (its wall seconds then come from its run's metrics, its CPU seconds from its record or none)."""
        run = f"{self.run}-{self.out.name}-{label.replace('+', '-')}"  # two benches of one workspace never share a run
        merged = self.out / "merged" / label
        final = merged / "merged.safetensors" if "adapter" in overlay else self.out / "checkpoints" / f"{label}.safetensors"
        record = self.out / "checkpoints" / f"{label}.time.json"
        if final.is_file():
            if record.is_file():
                times = json.loads(record.read_text(encoding="utf-8"))
                return str(final), times["wall"], times["cpu"]
            stamps = [row["time"] for row in map(json.loads, (self.settings.workspace / "runs" / run / "metrics.jsonl")
                                                 .read_text(encoding="utf-8").splitlines()) if "time" in row]
            return str(final), round(max(stamps) - min(stamps), 1), None
        config = self.config(run, self.manifests["am"], checkpoint, steps, overlay)
        result, wall, cpu = core("train", "--config", config, "--fresh")  # a stopped earlier attempt moves aside
        last = result["last_checkpoint"]
        if "adapter" in overlay:
            _, w, c = core("export", "--checkpoint", last, "--output", str(merged), "--merge", json_out=False)
        else:
            _, w, c = core("prune", "--checkpoint", last, "--output", str(final), "--force")
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps({"wall": wall + w, "cpu": cpu + c}), encoding="utf-8")
        return str(final), wall + w, cpu + c

    def strategy(self, label: str) -> dict[str, Any]:
        """Fine-tune and measure one strategy; return its table row."""
        kind, share = STRATEGIES[label]
        overlay = retention_overlay(kind, self.manifests["en"], share)
        if label == "staged":
            first = max(1, round(self.steps * STAGED_FIRST_SHARE))
            phase1, w1, c1 = self.train("staged-1", {"freeze": {"mode": "all-but-new-rows"}}, self.start, first)
            final, w2, c2 = self.train("staged", overlay, phase1, self.steps - first)
            wall, cpu = w1 + w2, None if c1 is None or c2 is None else c1 + c2
        else:
            final, wall, cpu = self.train(label, overlay, self.start, self.steps)
        return {"strategy": label, "checkpoint": final, "train_wall_s": round(wall, 1),
                "train_cpu_s": None if cpu is None else round(cpu, 1),
                "val_loss": {"en": self.validate(final, "en", label), "am": self.validate(final, "am", label)},
                "eval": slim(self.evaluate(final)) if self.speak else None}


def slim(result: dict[str, Any]) -> dict[str, Any]:
    """Return the figures of an `eval tts` result the table needs, per language."""
    def figures(rows: dict[str, Any], quality: dict[str, Any], chance: float) -> dict[str, Any]:
        model, codec = rows.get("model") or {}, rows.get("codec") or {}
        return {"dtw_identification": model.get("dtw_identification"), "ceiling": codec.get("dtw_identification"),
                "mcd_db": model.get("mcd_db"), "chance": chance, "flags": quality.get("flags_raised")}
    out = {"am": figures(result["rows"], result.get("quality") or {}, result["chance"])}
    base = (result.get("sections") or {}).get("base_language")
    if base:
        out["en"] = figures(base.get("rows") or {}, base.get("quality") or {}, base.get("chance"))
    return out


def markdown(report: dict[str, Any]) -> str:
    """Return the table of docs/benchmarks.md."""
    head = ("| strategy | English val loss (change) | English identification (ceiling) | English MCD dB | English flags | "
            "verdict | Amharic val loss | Amharic identification (ceiling) | Amharic MCD dB | Amharic flags | "
            "train wall s | train CPU s |\n|" + "---|" * 12)
    lines = [head]
    start = report["english_val_loss_start"]
    for row in report["rows"]:
        en, am = (row["eval"] or {}).get("en") or {}, (row["eval"] or {}).get("am") or {}
        change = (row["val_loss"]["en"] - start) / start
        lines.append(f"| {row['strategy']} | {row['val_loss']['en']:.3f} ({change:+.0%}) | {en.get('dtw_identification')} "
                     f"({en.get('ceiling')}) | {en.get('mcd_db')} | {', '.join(en.get('flags') or []) or 'none'} | "
                     f"**{row['verdict']['verdict']}** | {row['val_loss']['am']:.3f} | {am.get('dtw_identification')} "
                     f"({am.get('ceiling')}) | {am.get('mcd_db')} | {', '.join(am.get('flags') or []) or 'none'} | "
                     f"{row['train_wall_s']} | {row['train_cpu_s']} |")
    return "\n".join(lines)


def main() -> int:
    """Measure the strategies named (all by default) and write the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="the quickstart run's name (runs/<name>/ in the workspace)")
    parser.add_argument("--strategies", nargs="+", choices=list(STRATEGIES), default=list(STRATEGIES))
    parser.add_argument("--steps", type=int, help="fine-tune steps (default: the quickstart's)")
    parser.add_argument("--no-eval", action="store_true",
                        help="validation losses only (no held-out speech: the verdict by the loss alone)")
    parser.add_argument("--parallel", type=int, default=1, help="strategies trained side by side")
    parser.add_argument("--out", default="bench/retention",
                        help="workspace folder for configs and checkpoints (a run config's paths stay in the workspace)")
    parser.add_argument("--json", type=Path, help="write the report here")
    parser.add_argument("--markdown", action="store_true", help="print the table")
    args = parser.parse_args()
    bench = Bench(args.run, args.steps, load_settings().workspace / args.out, speak=not args.no_eval)
    started = time.time()
    en_start = bench.validate(bench.start, "en", "start")
    # the English base checkpoint's own evaluation (English alone: its figures sit at the top of the result)
    base_eval = slim(bench.evaluate(bench.base, base_only=True))["am"] if bench.speak else {}
    rows: list[dict[str, Any]] = []
    report: dict[str, Any] = {}
    with ThreadPoolExecutor(max_workers=args.parallel) as pool:
        for future in as_completed([pool.submit(bench.strategy, label) for label in args.strategies]):
            row = future.result()
            en = (row["eval"] or {}).get("en") or {}
            row["verdict"] = retention_verdict("English", (row["val_loss"]["en"] - en_start) / en_start,
                                               base_eval.get("dtw_identification"), en.get("dtw_identification"),
                                               en.get("chance"))
            rows.append(row)
            report = {"run": args.run, "steps": bench.steps, "english_val_loss_start": en_start,
                      "english_base_eval": base_eval, "rows": rows, "seconds": round(time.time() - started, 1),
                      "load_average": os.getloadavg(), "cpu_count": os.cpu_count(), "python": sys.version.split()[0]}
            if args.json:  # written after every strategy, so a long run shows what it has measured so far
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps(report, indent=1))
    if args.markdown:
        print(f"English base checkpoint: identification {base_eval.get('dtw_identification')} (ceiling "
              f"{base_eval.get('ceiling')}, chance {base_eval.get('chance')}); English val loss at the fine-tune's start "
              f"{en_start:.3f}")
        print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

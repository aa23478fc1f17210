"""The language-model quickstart: sweep vocabulary sizes, train an LM per compared size, compare bits per byte.

Per-token loss is not comparable across vocabularies; validation bits per byte is, so the report
answers "is a 400-piece vocabulary better than 1,600 for this corpus" with a measurement.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Sequence

from core.config import Settings, load_settings
from core.tokenizers.corpus import read_corpus_lines
from core.errors import InputError
from core.runs import run_folder
from journeys.quickstart import (
    load_preset,
    preset_fingerprint,
    run_config_data,
    run_name,
    val_metrics,
    write_lines,
    write_run_config,
)
from jobs.kinds import JobCatalogue
from journeys.report import write_report
from journeys.stages import StageRunner, expected_seconds
from core.data.sample_text import AMHARIC_SENTENCES, ENGLISH_SENTENCES

LM_KEYS = ("sweep_sizes", "compare_sizes", "model", "train", "val_ratio", "samples")


def compared_sizes(sweep: dict[str, Any], wanted: Sequence[int]) -> list[int]:
    """Return the sizes to train: the sweep's recommendation plus `wanted`, keeping those the corpus supports.

    Raises InputError when fewer than two remain.
    """
    trainable = {row["size"] for row in sweep["rows"] if not row.get("error")}
    chosen = {int(size) for size in wanted} | ({sweep["recommended"]} if sweep.get("recommended") else set())
    sizes = sorted(chosen & trainable)
    if len(sizes) < 2:
        errors = "; ".join(f"{r['size']}: {r['error']}" for r in sweep["rows"] if r.get("error"))
        raise InputError(f"only {sizes or 'no'} vocabulary size(s) of {sorted(chosen)} fit this corpus ({errors}). "
                         "Give a larger corpus or smaller compare_sizes in the preset.")
    return sizes


def run_lm_quickstart(corpus: Sequence[str] | None = None, preset: str = "lm", name: str | None = None,
                      settings: Settings | None = None, mode: str = "queue",
                      embedded_worker: bool = True, *, catalogue: JobCatalogue) -> dict[str, Any]:
    """Run the LM journey on `corpus` files (default: the sample's transcripts); return the report.

    `mode`, `embedded_worker` and `catalogue` choose how the stages run (see run_tts_quickstart).
    The report (runs/<name>/report.json and report.md) holds the sweep, one row per compared
    vocabulary size with validation bits per byte at start and end, and samples at two temperatures.
    Raises InputError for a bad preset or corpus and StageFailed when a stage fails.
    """
    settings = settings or load_settings()
    spec = load_preset(preset, "lm")
    missing = [key for key in LM_KEYS if key not in spec]
    if missing:
        raise InputError(f"{spec['preset_path']}: missing key(s) {', '.join(missing)}; copy config/quickstart/lm.yaml.")
    if len(spec["samples"]["temperatures"]) < 2:
        raise InputError(f"{spec['preset_path']}: samples.temperatures needs two temperatures.")
    name = run_name(f"quickstart-{spec['preset']}", name, settings)
    run_dir = run_folder(settings, name).path
    if corpus:
        files = [str(settings.resolve(path)) for path in corpus]
        read_corpus_lines(files)
    else:
        run_dir.mkdir(parents=True)
        files = [write_lines(run_dir / "corpus.txt", [*ENGLISH_SENTENCES, *AMHARIC_SENTENCES])]
    run_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    models: list[dict[str, Any]] = []
    fingerprint = preset_fingerprint({**spec, "corpus": files})
    temperatures = spec["samples"]["temperatures"][:2]

    def plan(sizes: Sequence[int]) -> Any:
        names = ["tokenizer.sweep", *(f"{stage}.{size}" for size in sizes for stage in ("tokenizer.train", "validate.start",
                                                                                         "train")),
                 *(f"generate.t{t}" for t in temperatures)]
        return expected_seconds(settings, "lm", spec, fingerprint, names)

    with StageRunner(settings, mode, embedded_worker, float(spec.get("stage_timeout_s", 3600)),
                     plan(spec["compare_sizes"]), catalogue=catalogue, journey=name) as stages:
        sweep = stages.run("tokenizer.sweep", "tokenizer.sweep", {
            "corpus": files, "sizes": ",".join(map(str, spec["sweep_sizes"]))})
        sizes = compared_sizes(sweep, spec["compare_sizes"])
        stages.expect(plan(sizes))
        for size in sizes:
            tokenizer = str(settings.workspace / "tokenizers" / name / f"lm_{size}.model")
            stages.run(f"tokenizer.train.{size}", "tokenizer.train", {
                "corpus": files, "vocab_size": size, "output": tokenizer})
            config = write_run_config(run_dir / "configs" / f"lm-{size}.yaml", run_config_data(
                f"{name}-lm-{size}", "lm", spec["train"], spec, {"corpus": files}, tokenizer=tokenizer))
            start = stages.run(f"validate.start.{size}", "validate", {"config": config})["val"]
            result = stages.run(f"train.{size}", "train", {"config": config})
            models.append({
                "vocab_size": size, "steps": result["step"], "tokenizer": tokenizer, "checkpoint": result["last_checkpoint"],
                "val_bpb_start": start.get("bpb"), "val_bpb_end": result["val"].get("bpb"),
                "val_loss_end": result["val"].get("loss"),
                "val_curve": [{"step": row["step"], "bpb": row.get("bpb")} for row in val_metrics(Path(result["run_dir"]))]})
        best = min(models, key=lambda m: m["val_bpb_end"])
        samples = []
        for temperature in temperatures:
            result = stages.run(f"generate.t{temperature}", "generate", {
                "checkpoint": best["checkpoint"], "prompt": spec["samples"]["prompt"], "temperature": temperature,
                "max_new_tokens": spec["samples"]["max_new_tokens"]})
            samples.append({"temperature": temperature, "vocab_size": best["vocab_size"],
                            "prompt": spec["samples"]["prompt"], "text": result.get("text", "")})
    report = {
        "name": name, "journey": "lm", "preset": spec["preset"], "preset_sha256": fingerprint, "mode": mode,
        "run_dir": str(run_dir),
        "command": "python -m core quickstart lm" + "".join(f" --corpus {c}" for c in corpus or []),
        "seconds": round(time.time() - started, 1), "corpus": files,
        "stages": [record.summary() for record in stages.records],
        "sweep": {k: sweep.get(k) for k in ("kind", "rows", "recommended", "reason", "lines_train", "lines_heldout")},
        "models": models, "best_vocab_size": best["vocab_size"], "samples": samples,
    }
    write_report(run_dir, report)
    return report

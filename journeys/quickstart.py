"""Quickstart presets and the TTS journey: English base → Amharic extension → frozen fine-tune → speech.

`run_tts_quickstart` runs, as stages (jobs on the queue by default, see `journeys.stages`):
the espeak sample and a codec; an English SentencePiece tokenizer and a base model trained on the
English clips (the stand-in for a pretrained IndexTTS/Chatterbox base); `tokenizer extend` with
Amharic (English protected); `embeddings extend --init fvt`; `validate` of the fine-tune's starting
model; the Amharic fine-tune with frozen base rows; `prune`, `synthesize` of held-out Amharic and
English sentences, and `eval tts`. What English kept is measured too: `validate` on the English clips'
validation split for the fine-tune's starting and final models, and `eval tts` on held-out English
sentences for the English base checkpoint and the final one. It writes `runs/<name>/report.json` and `report.md`.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import yaml

from core.config import REPO_ROOT, Settings, load_settings, read_yaml
from core.errors import InputError
from core.fsutil import atomic_write_text
from core.runs import RunFolder, run_folder
from jobs.kinds import JobCatalogue
from core.eval.quality.retention import retention_verdict
from core.training.retention import DEFAULT_RETENTION, retention_overlay
from core.training.run_config import check_cpu_threads
from journeys.report import base_language_summary, new_language_summary, write_report
from journeys.stages import StageRunner, expected_seconds
from core.data.sample_text import AMHARIC_SENTENCES, ENGLISH_SENTENCES
from core.structured import loads_json

PRESETS_DIR = REPO_ROOT / "config" / "quickstart"
TTS_KEYS = ("sample", "val_ratio", "codec", "tokenizer", "model", "base", "finetune", "synthesis", "eval")
TEXT_ROWS = ("text_embedding.weight", "text_head.weight", "text_head.bias")
JOURNEY_STRATEGIES = ("frozen", "full", "replay")  # retention strategies whose checkpoints the later stages read as they are


def preset_fingerprint(spec: dict[str, Any]) -> str:
    """Return the sha256 of a loaded preset's settings (its name, path and measured stage seconds left out): two
    runs with the same fingerprint run the same stages on the same amounts of work."""
    settings = {k: v for k, v in spec.items() if k not in ("preset", "preset_path", "stage_seconds")}
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()


def check_stage_seconds(spec: dict[str, Any]) -> None:
    """Raise InputError naming the preset file when its `stage_seconds` is not a mapping of stage name → seconds > 0."""
    seconds = spec.get("stage_seconds", {})
    bad = (not isinstance(seconds, dict)) or next(
        (k for k, v in seconds.items() if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0), None)
    if bad:
        raise InputError(f"{spec['preset_path']}: stage_seconds {seconds!r}: give each stage's measured wall seconds, "
                         "e.g. `stage_seconds: {{sample: 26.4, codec: 5.3}}` (numbers above 0).")


def tts_stage_names(spec: dict[str, Any]) -> list[str]:
    """Return the stages a TTS quickstart with the preset `spec` runs, in order."""
    synth = int(spec["synthesis"]["sentences"])
    return ["sample", "codec", "tokenizer.base", "train.base", "tokenizer.extend", "embeddings.extend", "preprocess.am",
            "validate.start", "validate.en.start", "train.finetune", "prune", "validate.en.end",
            *(f"synthesize.{lang}.{i + 1}" for lang in ("am", "en") for i in range(synth)),
            *(["eval.en.base", "eval.tts"] if int(spec["eval"]["sentences"]) >= 2 else [])]


def load_preset(preset: str, journey: str) -> dict[str, Any]:
    """Return the preset `preset` (a name in config/quickstart/ or a YAML path) for `journey` (tts | lm).

    Raises InputError naming the available presets when it does not exist, and naming the key
    when the file is not a preset of that journey.
    """
    path = Path(preset)
    if path.suffix not in (".yaml", ".yml"):
        path = PRESETS_DIR / f"{preset}.yaml"
    if not path.is_file():
        names = sorted(p.stem for p in PRESETS_DIR.glob("*.yaml") if read_yaml(p).get("journey") == journey)
        raise InputError(f"quickstart preset {preset!r} not found. Choose one of {', '.join(names)} or give a YAML file.")
    data = read_yaml(path)
    if data.get("journey") != journey:
        raise InputError(f"{path}: `journey: {data.get('journey')}` is not a {journey} quickstart preset.")
    data["preset"] = path.stem
    data["preset_path"] = str(path)
    check_stage_seconds(data)
    return data


def run_name(prefix: str, name: str | None, settings: Settings) -> str:
    """Return `name`, or `<prefix>-<UTC timestamp>`; raise InputError when runs/<name>/ already exists."""
    chosen = name or f"{prefix}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
    if run_folder(settings, chosen).path.exists():
        raise InputError(f"runs/{chosen} already exists. Pass another --name, or delete that folder first.")
    return chosen


def rows_sha256(checkpoint: Path, rows: int) -> str:
    """Return one sha256 over the first `rows` rows of the checkpoint's text embedding and head tensors."""
    from core.checkpoint import load_checkpoint

    state = load_checkpoint(checkpoint).state_dict
    digest = hashlib.sha256()
    for key in TEXT_ROWS:
        if key in state:
            digest.update(key.encode())
            digest.update(state[key][:rows].float().contiguous().numpy().tobytes())
    return digest.hexdigest()


def write_lines(path: Path, lines: list[str]) -> str:
    """Write `lines` (one per line) atomically to `path`, creating its folder; return the path as text."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, "\n".join(lines) + "\n")
    return str(path)


def _split_manifest(manifest: Path) -> dict[str, str]:
    """Write `<language>.jsonl` beside `manifest` for each language in it; return language → path."""
    rows: dict[str, list[str]] = {}
    for line in manifest.read_text(encoding="utf-8").splitlines():
        if line.strip():
            rows.setdefault(loads_json(line, str(manifest))["language"], []).append(line)
    return {lang: write_lines(manifest.parent / f"{lang}.jsonl", lines) for lang, lines in rows.items()}


def write_run_config(path: Path, data: dict[str, Any]) -> str:
    """Write the run config `data` as YAML to `path`; return the path as text."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return str(path)


def run_config_data(name: str, task: str, step: dict[str, Any], preset: dict[str, Any], data: dict[str, Any],
                    **fields: Any) -> dict[str, Any]:
    """Return a run config (`train --config` shape) for a preset's training step: steps, batch, lr, warmup, cosine,
    the step's `loss` weights when it sets them, and the preset's `cpu_threads` when it sets them."""
    steps = int(step["steps"])
    return {
        "name": name, "task": task, **fields,
        "data": {**data, "val_ratio": preset["val_ratio"]},
        "model": dict(preset["model"]),
        "optim": {"lr": step["lr"], "warmup_steps": step["warmup_steps"], "new_row_warmup_steps": step["warmup_steps"],
                  "schedule": "cosine"},
        "batch": {"size": step["batch_size"]},
        "schedule": {"max_steps": steps, "val_every": step.get("val_every", steps), "save_every": steps,
                     "keep_last": 1, "log_every": max(1, min(10, steps // 5))},
        "precision": preset.get("precision", "auto"),
        **({"cpu_threads": preset["cpu_threads"]} if "cpu_threads" in preset else {}),
        **({"loss": step["loss"]} if "loss" in step else {}),
    }


def val_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """Return the `val` records of a run's metrics.jsonl, in order."""
    return RunFolder(run_dir).metrics("val")


def retention_of(preset: dict[str, Any]) -> dict[str, Any]:
    """Return how the preset's Amharic fine-tune keeps English: its `finetune.retention`, else DEFAULT_RETENTION."""
    return {**DEFAULT_RETENTION, **(preset["finetune"].get("retention") or {})}


def _check_preset(preset: dict[str, Any]) -> tuple[list[str], list[str]]:
    missing = [key for key in TTS_KEYS if key not in preset]
    if missing:
        raise InputError(f"{preset['preset_path']}: missing key(s) {', '.join(missing)}; copy config/quickstart/quick.yaml.")
    per_language = int(preset["sample"]["per_language"])
    held = int(preset["synthesis"]["sentences"]) + int(preset["eval"]["sentences"])
    limit = min(len(ENGLISH_SENTENCES), len(AMHARIC_SENTENCES)) - held
    if not 4 <= per_language <= limit:
        raise InputError(f"{preset['preset_path']}: sample.per_language {per_language}: choose 4 to {limit} so "
                         f"{held} sentences per language stay out of training.")
    if "hop_length" in preset["codec"]:
        from core.speech.codec import check_hop_length

        check_hop_length(preset["codec"]["hop_length"], f"{preset['preset_path']}: codec.hop_length")
    strategy = retention_of(preset)["strategy"]
    if strategy not in JOURNEY_STRATEGIES:
        raise InputError(f"{preset['preset_path']}: finetune.retention.strategy {strategy!r}: the journey runs "
                         f"{', '.join(JOURNEY_STRATEGIES)} (LoRA strategies: bench/retention.py).")
    check_cpu_threads(preset.get("cpu_threads", "auto"), f"{preset['preset_path']}: cpu_threads")
    recombined = preset["sample"].get("recombined", 0)
    if not isinstance(recombined, int) or isinstance(recombined, bool) or recombined < 0:
        raise InputError(f"{preset['preset_path']}: sample.recombined {recombined!r}: give a whole number ≥ 0 (clips per "
                         "language whose sentences reshuffle the training sentences' words).")
    return list(ENGLISH_SENTENCES[per_language:per_language + held]), list(AMHARIC_SENTENCES[per_language:per_language + held])


def _speak(stages: StageRunner, spec: dict[str, Any], checkpoint: Path, run_dir: Path, sample_audio: Path,
           held_en: list[str], held_am: list[str]) -> list[dict[str, Any]]:
    """Synthesize the first held-out sentences of each language; return one entry per clip."""
    count = int(spec["synthesis"]["sentences"])
    audio = []
    for lang, sentences in (("am", held_am[:count]), ("en", held_en[:count])):
        reference = str(sorted(sample_audio.glob(f"{lang}_*.wav"))[0])
        for i, sentence in enumerate(sentences):
            out = run_dir / "audio" / f"{lang}_{i + 1}.wav"
            result = stages.run(f"synthesize.{lang}.{i + 1}", "synthesize", {
                "checkpoint": str(checkpoint), "text": sentence, "reference": reference, "output": str(out),
                "language": lang, "temperature": spec["synthesis"].get("temperature", 0.8)})
            audio.append({"language": lang, "text": sentence, "path": str(out), "rtf": result.get("rtf"),
                          "audio_seconds": result.get("audio_seconds")})
    return audio


def _tts_figures(base_tok: dict[str, Any], base: dict[str, Any], extended: dict[str, Any], val_start: dict[str, float],
                 fine: dict[str, Any], final: Path) -> dict[str, Any]:
    """Return the report's `tokenizer`, `freeze` and `training` sections from the stages' results."""
    base_size = int(extended["base_size"])
    curve = val_metrics(Path(fine["run_dir"]))
    return {
        "tokenizer": {
            "base_size": base_size, "size": int(extended["new_size"]), "base_trained_size": base_tok.get("size"),
            "unk_rate_new_language": extended["unk_rate"], "added_pieces_used": extended.get("added_pieces_used"),
            "characters_forced": extended.get("characters_forced"), "base_drift": extended.get("base_drift"),
            "path": extended.get("output")},
        "freeze": {
            "base_rows": base_size,
            "base_rows_sha256_before": rows_sha256(Path(base["last_checkpoint"]), base_size),
            "base_rows_sha256_after": rows_sha256(final, base_size),
            "trainer": fine.get("base_rows_sha256"), "frozen_rows": fine.get("frozen_rows")},
        "training": {
            "base_run": base["run_dir"], "base_steps": base["step"], "base_val": base.get("val"),
            "finetune_run": fine["run_dir"], "finetune_steps": fine["step"],
            "val_mel_loss_start": val_start.get("mel_loss"), "val_text_loss_start": val_start.get("text_loss"),
            "val_mel_loss_end": fine["val"].get("mel_loss"), "val_text_loss_end": fine["val"].get("text_loss"),
            "val_mel_loss_best": min((row["mel_loss"] for row in curve), default=None),
            "val_curve": [{k: row.get(k) for k in ("step", "mel_loss", "text_loss", "mel_top1")} for row in curve],
            "val_samples": fine.get("val_samples"), "train_samples": fine.get("train_samples")},
    }


def _eval_summary(result: dict[str, Any]) -> dict[str, Any]:
    """Return an `eval tts` result (or its base-language section) as the report keeps it: without per-sentence rows."""
    return {"checkpoint": result.get("checkpoint"), "step": result.get("step"),
            "sentences": result.get("sentences", result.get("used")), "chance": result["chance"],
            "rows": {row: {k: v for k, v in values.items() if k != "per_sentence"} for row, values in result["rows"].items()},
            "audio": result.get("audio"),
            "quality": {k: v for k, v in (result.get("quality") or {}).items() if k != "per_sentence"}}


def _base_language(val_start: dict[str, Any], val_end: dict[str, Any], before: dict[str, Any] | None,
                   final: dict[str, Any] | None) -> dict[str, Any]:
    """Return the report's `base_language` section: what English kept through the Amharic fine-tune — its
    validation losses on the fine-tune's starting and final models, and `eval tts` on held-out English
    sentences for the English base checkpoint (`before`) and the final Amharic one (`after`)."""
    start, end = val_start["val"], val_end["val"]
    loss_start, loss_end = start.get("loss"), end.get("loss")
    change = None if loss_start is None or loss_end is None else round((loss_end - loss_start) / loss_start, 4)
    after = (final or {}).get("sections", {}).get("base_language")
    identification = [None if e is None else e["rows"]["model"].get("dtw_identification") for e in (before, after)]
    verdict = retention_verdict("English", change, identification[0], identification[1],
                                None if after is None else after.get("chance"))
    return {
        "language": "en", "val_samples": val_start.get("val_samples"),
        "val_base_loss_start": loss_start, "val_base_loss_end": loss_end, "val_base_loss_change": change,
        "val_base_mel_loss_start": start.get("mel_loss"), "val_base_mel_loss_end": end.get("mel_loss"),
        "val_base_text_loss_start": start.get("text_loss"), "val_base_text_loss_end": end.get("text_loss"),
        "before": None if before is None else _eval_summary(before),
        "after": None if after is None else {**_eval_summary(after), "checkpoint": final["checkpoint"],
                                             "step": final["step"]},
        "verdict": verdict,
    }


def run_tts_quickstart(preset: str = "quick", name: str | None = None, settings: Settings | None = None,
                       mode: str = "queue", embedded_worker: bool = True, *, catalogue: JobCatalogue) -> dict[str, Any]:
    """Run the TTS journey with `preset`; return the report (also written to runs/<name>/report.json).

    `mode` queue submits every stage as a job (with a worker in this process unless
    `embedded_worker` is False); inline runs the commands in this process. `catalogue` (from the
    entry point) checks and runs the stage commands.
    Raises InputError for a bad preset or an existing run folder, StageFailed when a stage fails.
    """
    settings = settings or load_settings()
    spec = load_preset(preset, "tts")
    held_en, held_am = _check_preset(spec)
    name = run_name(f"quickstart-{spec['preset']}", name, settings)
    ws = settings.workspace
    run_dir, data_dir = run_folder(settings, name).path, ws / "datasets" / name
    tok_dir, ckpt_dir = ws / "tokenizers" / name, ws / "checkpoints" / name
    run_dir.mkdir(parents=True)
    started = time.time()
    synth_n = int(spec["synthesis"]["sentences"])
    fingerprint = preset_fingerprint(spec)
    plan = expected_seconds(settings, "tts", spec, fingerprint, tts_stage_names(spec))
    with StageRunner(settings, mode, embedded_worker, float(spec.get("stage_timeout_s", 3600)), plan,
                     catalogue=catalogue, journey=name) as stages:
        sample = stages.run("sample", "dataset.sample", {
            "output": str(data_dir / "sample"), "languages": "en,am", "per_language": spec["sample"]["per_language"],
            "recombined": spec["sample"].get("recombined", 0)})
        manifests = _split_manifest(data_dir / "sample" / "manifest.jsonl")
        codec_path = str(ws / "codecs" / f"{name}.pt")
        codec = stages.run("codec", "codec.train", {
            "manifest": str(data_dir / "sample" / "manifest.jsonl"), "output": codec_path,
            "codebook_size": spec["codec"]["codebook_size"], "iterations": spec["codec"]["iterations"],
            "val_ratio": spec["val_ratio"], "eval_clips": spec["codec"].get("eval_clips", 0),
            **({"hop_length": spec["codec"]["hop_length"]} if "hop_length" in spec["codec"] else {})})
        text = data_dir / "text"
        en_txt = write_lines(text / "en.txt", list(ENGLISH_SENTENCES))
        am_txt = write_lines(text / "am.txt", list(AMHARIC_SENTENCES))
        heldout_am = write_lines(text / "heldout_am.txt", held_am[synth_n:])
        heldout_en = write_lines(text / "heldout_en.txt", held_en[synth_n:])
        base_tok = stages.run("tokenizer.base", "tokenizer.train", {
            "corpus": [en_txt], "vocab_size": spec["tokenizer"]["base_size"], "output": str(tok_dir / "en.model")})
        base_cfg = write_run_config(run_dir / "configs" / "en-base.yaml", run_config_data(
            f"{name}-en-base", "tts", spec["base"], spec, {"manifest": manifests["en"]}, tokenizer=str(tok_dir / "en.model"),
            codec=codec_path))
        base = stages.run("train.base", "train", {"config": base_cfg})
        extended = stages.run("tokenizer.extend", "tokenizer.extend", {
            "base": str(tok_dir / "en.model"), "corpus": [am_txt], "target_size": spec["tokenizer"]["extended_size"],
            "output": str(tok_dir / "en_am.model"), "protect_corpus": [en_txt]})
        init_path = ckpt_dir / "en_am_fvt.safetensors"
        stages.run("embeddings.extend", "embeddings.extend", {
            "checkpoint": base["last_checkpoint"], "base_tokenizer": str(tok_dir / "en.model"),
            "tokenizer": str(tok_dir / "en_am.model"), "output": str(init_path), "init": "fvt"})
        ft_name = f"{name}-am-finetune"
        retention = retention_of(spec)
        keep = retention_overlay(retention["strategy"], manifests["en"], retention.get("share"))
        ft_cfg = write_run_config(run_dir / "configs" / "am-finetune.yaml", {
            **run_config_data(ft_name, "tts", spec["finetune"], spec, {"manifest": manifests["am"], **keep.get("data", {})},
                              tokenizer=str(tok_dir / "en_am.model"), codec=codec_path, base_checkpoint=str(init_path)),
            "freeze": {**keep["freeze"], "until": "auto"},
            "loss": spec["finetune"].get("loss", {"text_weight": 0.4, "mel_weight": 0.6})})
        stages.run("preprocess.am", "preprocess", {
            "manifest": manifests["am"], "tokenizer": str(tok_dir / "en_am.model"), "codec": codec_path,
            "val_ratio": spec["val_ratio"]})
        val_start = stages.run("validate.start", "validate", {"config": ft_cfg})["val"]

        def english_val(stage: str, checkpoint: Path) -> dict[str, Any]:
            """Validate `checkpoint` on the English clips' validation split (the base language kept or lost)."""
            config = write_run_config(run_dir / "configs" / f"{stage.replace('.', '-')}.yaml", {
                **run_config_data(f"{name}-en-val", "tts", spec["finetune"], spec, {"manifest": manifests["en"]},
                                  tokenizer=str(tok_dir / "en_am.model"), codec=codec_path, base_checkpoint=str(checkpoint)),
                "loss": spec["finetune"].get("loss", {"text_weight": 0.4, "mel_weight": 0.6})})
            return stages.run(stage, "validate", {"config": config})

        en_val_start = english_val("validate.en.start", init_path)
        fine = stages.run("train.finetune", "train", {"config": ft_cfg})
        final = ckpt_dir / "am.safetensors"
        stages.run("prune", "prune", {"checkpoint": fine["last_checkpoint"], "output": str(final), "force": True})
        en_val_end = english_val("validate.en.end", final)
        audio = _speak(stages, spec, final, run_dir, data_dir / "sample" / "audio", held_en, held_am)
        evaluation = en_before = None
        if int(spec["eval"]["sentences"]) >= 2:
            sampling = {"temperature": spec["eval"]["temperature"]} if "temperature" in spec["eval"] else {}
            en_before = stages.run("eval.en.base", "eval.tts", {
                "checkpoint": base["last_checkpoint"], "sentences": heldout_en, "references": "espeak", "language": "en",
                "no_wer": True, **sampling})
            evaluation = stages.run("eval.tts", "eval.tts", {
                "checkpoint": str(final), "sentences": heldout_am, "references": "espeak", "language": "am",
                "base_sentences": heldout_en, "base_references": "espeak", "base_language": "en", "no_wer": True,
                **sampling})
            # the pruned final checkpoint lies outside runs/, the folder TensorBoard reads: its evaluation goes
            # beside the fine-tune's curves, at its last step
            from core.eval.tts import write_entry_scalars  # torch: imported when a journey evaluates

            write_entry_scalars(RunFolder(Path(fine["run_dir"])).tensorboard, evaluation)
    report = {
        "name": name, "journey": "tts", "preset": spec["preset"], "preset_sha256": fingerprint, "mode": mode,
        "run_dir": str(run_dir),
        "command": f"python -m core quickstart tts --preset {spec['preset']}",
        "seconds": round(time.time() - started, 1),
        "stages": [record.summary() for record in stages.records],
        "sample": {"per_language": int(spec["sample"]["per_language"]), "recombined": int(spec["sample"].get("recombined", 0)),
                   "clips": sample.get("kept"),
                   "manifests": manifests},
        "codec": {"codebook_size": spec["codec"]["codebook_size"], "frame_rate": codec.get("frame_rate"), "path": codec_path,
                  "eval": codec.get("eval")},
        **_tts_figures(base_tok, base, extended, val_start, fine, final),
        "checkpoint": str(final),
        "audio": audio,
        "eval": None if evaluation is None else _eval_summary(evaluation),
        "retention": {**retention, "replay_manifest": keep.get("data", {}).get("replay", {}).get("manifest"),
                      "measured_by": "bench/retention.py (docs/benchmarks.md, \"Keeping English\")"},
        "base_language": _base_language(en_val_start, en_val_end, en_before, evaluation),
    }
    report["base_language"]["summary"] = base_language_summary(report["base_language"])
    report["new_language"] = {"language": "am", "summary": new_language_summary(report["eval"], "Amharic")}
    write_report(run_dir, report)
    return report

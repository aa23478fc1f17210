"""What a job is to a person: its kind in words ("training" for `train`) and what it works on (its run's name)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

KIND_WORDS = {  # a job's kind (its CLI command) → what people call it
    "quickstart.tts": "TTS quickstart", "quickstart.lm": "LM quickstart", "train": "training", "validate": "validation",
    "dataset.import": "dataset import", "dataset.sample": "sample dataset", "dataset.filter": "dataset filter",
    "dataset.split": "dataset split", "codec.train": "codec training", "codec.eval": "codec check",
    "tokenizer.train": "tokenizer training", "tokenizer.extend": "tokenizer extension",
    "tokenizer.merge": "tokenizer merge", "tokenizer.sweep": "vocabulary size sweep",
    "tokenizer.inspect": "tokenizer report", "embeddings.extend": "embedding growth", "preprocess": "feature preparation",
    "eval.tts": "speech evaluation", "synthesize": "speech synthesis", "generate": "text generation",
    "prune": "prune", "export": "export", "doctor": "doctor check", "corpus.collect": "corpus collection",
    "pairs.build": "pair building", "models.pull": "release pull",
}


def kind_words(kind: str | None, start: bool = False) -> str:
    """Return what people call a job of `kind` ("training" for `train`): KIND_WORDS, else its words;
    with `start`, its first letter in capitals (to start a sentence)."""
    words = KIND_WORDS.get(kind or "", (kind or "job").replace(".", " ").replace("_", " "))
    return words[:1].upper() + words[1:] if start else words


def job_subject(job: dict[str, Any]) -> str:
    """Return what a job works on: its run folder's name, else the name of what it writes (`output`, a guided
    fine-tune's tokenizer, an export's folder), else of its checkpoint, config or manifest, else its journey's
    `name`; `—` for none."""
    if job.get("run_dir"):
        return Path(job["run_dir"]).name
    params = job.get("params") or {}
    for key in ("output", "checkpoint", "config", "manifest"):
        value = params.get(key)
        if isinstance(value, str) and value:
            path = Path(value)
            return path.parent.name if path.name == "config.yaml" else path.stem if path.suffix else path.name
    return str(params.get("name") or "—")

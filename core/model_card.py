"""A Hugging Face model card (`README.md`) for an export folder, written from what the run recorded: the base
release and revision (`CheckpointMeta.release`, from `models pull`), the tokenizer and its added pieces, the
languages, the training data's hours and steps, and the quality report of the exported checkpoint (its
`eval.json` entry, written by `eval tts` or the run's periodic evaluation) with how each figure was measured.
Nothing is estimated: a figure the run did not measure is written as not measured, with the reason.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any, Mapping

import yaml

from core.checkpoint import load_checkpoint
from core.config import Settings
from core.errors import InputError
from core.fsutil import atomic_write_text
from core.runs import eval_file_beside, read_evaluations, run_folder_of_checkpoint

CARD_NAME = "README.md"
NOT_MEASURED = "not measured"


def upload_command(repo: str, folder: Path) -> str:
    """Return the `hf upload` command that publishes `folder` as the model repository `repo`."""
    return f"hf upload {shlex.quote(repo)} {shlex.quote(str(folder))} . --repo-type model"


def _data_hours(checkpoint: Path, settings: Settings) -> float | None:
    """Return the hours of the training manifest of the run that wrote `checkpoint` (None when unknown)."""
    from core.data.manifest import load_manifest_rows

    run = run_folder_of_checkpoint(checkpoint)
    if run is None or not run.config.is_file():
        return None
    manifest = ((yaml.safe_load(run.config.read_text(encoding="utf-8")) or {}).get("data") or {}).get("manifest")
    if not manifest:
        return None
    try:
        rows = load_manifest_rows(settings.check_inside_roots(manifest))
    except InputError:
        return None
    seconds = [row.duration for row in rows if row.duration is not None]
    return round(sum(seconds) / 3600, 4) if seconds else None


def _figure(value: Any, why: str = "") -> str:
    return NOT_MEASURED + (f" ({why})" if why else "") if value is None else str(value)


def quality_lines(entry: Mapping[str, Any]) -> list[str]:
    """Return the card's quality table rows (markdown) from one `eval.json` entry, each with how it was measured."""
    quality = entry.get("quality") or {}
    sentences = (quality.get("per_sentence") or [])
    unstopped = sum(1 for row in sentences if not row.get("stopped"))
    model = (entry.get("rows") or {}).get("model") or {}
    failure = f"{unstopped / len(sentences):.4f} ({unstopped} of {len(sentences)})" if sentences else None
    return [
        "| figure | value | how it was measured |",
        "|---|---|---|",
        f"| CER | {_figure(quality.get('cer'), 'no eval.asr hook')} | the run's ASR hook's transcripts against the sentences |",
        f"| speaker similarity | {_figure(quality.get('speaker_similarity'))} | mean cosine of speaker embeddings, output vs reference |",
        f"| MOS estimate | {_figure(quality.get('mos_estimate'), 'DNSMOS off')} | DNSMOS (ONNX), mean over the sentences |",
        f"| failure rate | {_figure(failure)} | share of sentences whose generation did not reach the stop token |",
        f"| flags raised | {', '.join(quality.get('flags_raised') or []) or 'none'} | no stop, length out of range, loops, prompt copying, text ignored |",
        f"| DTW identification | {_figure(model.get('dtw_identification'))} | share of outputs nearest their own reference (chance {entry.get('chance')}) |",
    ]


def card_entry(checkpoint: Path) -> dict[str, Any]:
    """Return the checkpoint's own quality report: its entry in the `eval.json` beside it.

    Raises InputError when it has none, with the fix (`eval tts` on it, or a run with periodic evaluation).
    """
    entry = read_evaluations(eval_file_beside(checkpoint)).get(checkpoint.name)
    if entry is None:
        raise InputError(f"{checkpoint}: no quality report ({eval_file_beside(checkpoint)} has no entry for it); run "
                         f"`python -m core eval tts --checkpoint {checkpoint} …` first, then export with --hub-card.")
    return entry


def write_model_card(checkpoint: Path, output_dir: Path, settings: Settings, repo: str | None = None) -> Path:
    """Write `output_dir/README.md` for the export of `checkpoint` and return its path.

    The quality figures are those of the checkpoint's own `eval.json` entry. Raises InputError like `card_entry`.
    """
    meta = load_checkpoint(checkpoint).meta or {}
    entry = card_entry(checkpoint)
    release = meta.get("release") or {}
    source = (release.get("sources") or [{}])[0]
    note = json.loads((output_dir / "linguaforge.json").read_text(encoding="utf-8")) if (output_dir / "linguaforge.json").is_file() else {}
    languages = sorted({entry.get("language"), *note.get("language_tags", [])} - {None})
    size, base = meta.get("tokenizer_size"), meta.get("base_size")
    hours = _data_hours(checkpoint, settings)
    repo_shown = repo or "OWNER/NAME"
    front = {"library_name": "linguaforge", "pipeline_tag": "text-to-speech", "tags": ["linguaforge", str(meta.get("family"))],
             "language": languages or None, "base_model": source.get("repo")}
    lines = [
        "---", yaml.safe_dump({k: v for k, v in front.items() if v}, sort_keys=False, allow_unicode=True).strip(), "---", "",
        f"# {output_dir.name}", "",
        f"A {meta.get('family')} model fine-tuned with LinguaForge for {', '.join(languages) or 'its languages'}.", "",
        "| | |", "|---|---|",
        f"| base release | {release.get('label', 'not recorded (not pulled with `models pull`)')} |",
        f"| base repository and revision | {source.get('repo', '—')}@{source.get('revision', '—')} |",
        f"| tokenizer | {_figure(size)} ids ({meta.get('tokenizer_fingerprint', '')[:12]}), "
        f"{_figure(size - base if size is not None and base is not None else None)} added to the base's {_figure(base)} |",
        f"| languages | {', '.join(languages) or 'not recorded'} |",
        f"| training data | {_figure(hours, 'the run folder or its manifest is not at hand')} hours |",
        f"| training steps | {_figure(meta.get('step'))} |", "",
        f"## Quality ({entry.get('language')}, {entry.get('sentences')} held-out sentences, checkpoint step {entry.get('step')})", "",
        *quality_lines(entry), "",
        "## Upload", "", "```bash", upload_command(repo_shown, output_dir), "```", "",
    ]
    return atomic_write_text(output_dir / CARD_NAME, "\n".join(lines))


def push_export(output_dir: Path, repo: str) -> str:
    """Upload `output_dir` to the model repository `repo` with huggingface_hub and return the commit URL
    (`check_push` first, before the export). Raises InputError when the Hub refuses."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    api = HfApi()
    try:
        api.create_repo(repo, repo_type="model", exist_ok=True)
        return str(api.upload_folder(repo_id=repo, folder_path=str(output_dir), repo_type="model").commit_url)
    except HfHubHTTPError as exc:
        raise InputError(f"--push {repo}: the Hub refused the upload ({str(exc).splitlines()[0]}).") from exc


def check_push(repo: str, output_dir: Path) -> None:
    """Return None when `repo` is owner/name and a Hugging Face token is configured; else raise InputError in one
    line with the fix (before any work is done)."""
    from huggingface_hub import get_token

    from core.families.releases import parse_hf_id

    parse_hf_id(repo)
    if not get_token():
        raise InputError(f"--push {repo}: no Hugging Face token is configured; run `hf auth login` (or set HF_TOKEN), "
                         f"or export without --push and upload with `{upload_command(repo, output_dir)}`.")

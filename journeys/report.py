"""The quickstart report: `report.json` (the contract of docs/guides/quickstart.md and shared/DESIGN.md) and a readable `report.md` beside it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from core.eval.quality.retention import KEPT_LOSS_RISE, LOST_LOSS_RISE, retention_verdict
from core.fsutil import atomic_write_json, atomic_write_text
from core.runs import RunFolder
from journeys.stages import stage_title

FLAG_WORDS = {  # a quality flag's id → what it checks, in words
    "no_stop": "the model ended each sentence", "length_out_of_range": "speech as long as its text needs",
    "loops": "no stretch repeated", "prompt_copying": "the voice prompt not spoken back",
    "text_ignored": "speech that follows its sentence",
}
RAISED_WORDS = {  # a raised quality flag's id → what it means for the speech, in words
    "no_stop": "some sentences never ended", "length_out_of_range": "speech too long or too short for its text",
    "loops": "stretches repeat", "prompt_copying": "the voice prompt is spoken back",
    "text_ignored": "the speech no longer follows its sentence",
}


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_fmt(cell) for cell in row) + " |" for row in rows]
    return lines + [""]


def _link(run_dir: Path, path: str) -> str:
    return os.path.relpath(path, run_dir)


def _stages(report: dict[str, Any]) -> list[str]:
    """The stage table: each stage in words, its wall seconds, its CPU seconds where measured, and its job."""
    cpu = any(s.get("cpu_seconds") is not None for s in report["stages"])
    rows = [[stage_title(s["name"]), s["seconds"], *([s.get("cpu_seconds")] if cpu else []), s["job_id"] or "—"]
            for s in report["stages"]]
    note = [] if cpu else ["CPU seconds are not measured when a worker outside the journey's process ran the stages.", ""]
    return ["## Stages", "", *_table(["stage", "seconds", *(["CPU seconds"] if cpu else []), "job"], rows), *note]


def _tts_markdown(report: dict[str, Any], run_dir: Path) -> list[str]:
    tok, freeze, training = report["tokenizer"], report["freeze"], report["training"]
    drift = tok.get("base_drift") or {}
    same = freeze["base_rows_sha256_before"] == freeze["base_rows_sha256_after"]
    lines = [
        "## Tokenizer", "",
        *_table(["base size", "extended size", "Amharic unknown-piece rate", "added pieces used", "English lines checked",
                 "English lines changed"],
                [[tok["base_size"], tok["size"], tok["unk_rate_new_language"], tok.get("added_pieces_used"),
                  drift.get("lines_checked"), drift.get("lines_changed")]]),
        "## Frozen base rows", "",
        f"Rows 0–{freeze['base_rows'] - 1} of the text embedding and head, English base checkpoint vs the final "
        f"Amharic checkpoint: **{'unchanged' if same else 'CHANGED'}**.", "",
        f"- before: `{freeze['base_rows_sha256_before']}`",
        f"- after:  `{freeze['base_rows_sha256_after']}`", "",
        "## Training", "",
        *_table(["", "steps", "validation speech loss", "validation text loss"], [
            ["English base (end)", training["base_steps"], (training.get("base_val") or {}).get("mel_loss"),
             (training.get("base_val") or {}).get("text_loss")],
            ["Amharic fine-tune, start", 0, training["val_mel_loss_start"], training["val_text_loss_start"]],
            ["Amharic fine-tune, end", training["finetune_steps"], training["val_mel_loss_end"],
             training["val_text_loss_end"]]]),
        "Validation speech loss by step: " + ", ".join(f"step {row['step']}: {_fmt(row['mel_loss'])}"
                                                       for row in training["val_curve"]) + ".", "",
    ]
    codec_eval = (report.get("codec") or {}).get("eval")
    if report.get("eval"):
        rows = [[name, values.get("mcd_db"), values.get("duration_ratio"), values.get("dtw_identification")]
                for name, values in report["eval"]["rows"].items()]
        lines += ["## Evaluation of held-out Amharic sentences", "",
                  *([report["new_language"]["summary"], ""] if (report.get("new_language") or {}).get("summary") else []),
                  "*MCD* (dB): how far the speech is from a reference recording of the sentence, lower is better. "
                  "*Duration ratio*: its length over the reference's. *DTW identification*: the share of sentences "
                  "whose speech is closest to its own reference. The `codec` row is the ceiling: the references "
                  "passed through the codec alone.", "",
                  *_table(["row", "MCD dB", "duration ratio", "DTW identification"], rows)]
        quality = report["eval"].get("quality") or {}
        if quality.get("flags"):
            lines += ["Failure flags:", "",
                      *_table(["checks that", "result", "measured"],
                              [[FLAG_WORDS.get(name, name.replace("_", " ")), "FLAG" if flag["flagged"] else "ok",
                                flag["words"]] for name, flag in quality["flags"].items()])]
    elif codec_eval:
        lines += ["## Codec", "", *_table(list(codec_eval), [list(codec_eval.values())])]
    lines += _base_language_markdown(report.get("base_language"))
    lines += ["## Audio (sentences not in training)", "",
              *_table(["language", "text", "file", "real-time factor"],
                      [[a["language"], a["text"], f"[{Path(a['path']).name}]({_link(run_dir, a['path'])})", a["rtf"]]
                       for a in report["audio"]])]
    return lines


def _flags_words(evaluation: dict[str, Any]) -> str:
    """The failure flags an evaluation raised, in words ("text ignored, loops"), or "none"."""
    raised = (evaluation.get("quality") or {}).get("flags_raised")
    return "none" if not raised else ", ".join(RAISED_WORDS.get(name, name.replace("_", " ")) for name in raised)


def base_language_summary(section: dict[str, Any]) -> str:
    """Return one sentence in plain words of what English kept through the fine-tune (the report's `base_language`):
    the verdict (its `verdict`, else judged from the validation loss change by core.eval.quality.retention), the
    loss change in words, DTW identification against the codec's ceiling and MCD before → after, and the failure
    flags before → after in words."""
    before, after = section.get("before") or {}, section.get("after") or {}
    change = section.get("val_base_loss_change")
    verdict = section.get("verdict") or retention_verdict("English", change)
    parts = []
    if change is not None:
        parts.append(f"the model predicts held-out English speech {abs(change):.0%} {'worse' if change > 0 else 'better'} "
                     f"than before the fine-tune (validation loss {_fmt(section['val_base_loss_start'])} → "
                     f"{_fmt(section['val_base_loss_end'])}; kept up to +{KEPT_LOSS_RISE:.0%}, lost beyond "
                     f"+{LOST_LOSS_RISE:.0%})")
    if before and after:
        model_b, model_a = before["rows"]["model"], after["rows"]["model"]
        ceiling = (after["rows"].get("codec") or {}).get("dtw_identification")
        parts.append(f"held-out English sentences identified {_fmt(model_b['dtw_identification'])} → "
                     f"{_fmt(model_a['dtw_identification'])} (the codec's ceiling {_fmt(ceiling)}, chance {_fmt(after['chance'])}), "
                     f"MCD {_fmt(model_b['mcd_db'], 3)} → {_fmt(model_a['mcd_db'], 3)} dB, "
                     f"failure flags {_flags_words(before)} → {_flags_words(after)}")
    if verdict.get("identification_note"):
        parts.append(verdict["identification_note"])
    head = (f"English **{verdict['verdict']}** through the Amharic fine-tune" if verdict["verdict"] != "unmeasured"
            else "English after the Amharic fine-tune")
    return head + ": " + "; ".join(parts) + "." if parts else ""


def new_language_summary(evaluation: dict[str, Any] | None, language: str) -> str:
    """Return one sentence in plain words of how the new language reads: held-out sentences identified against the
    codec's ceiling and chance, MCD, and the failure flags; empty when it was not evaluated."""
    if not evaluation:
        return ""
    model, codec = evaluation["rows"]["model"], evaluation["rows"].get("codec") or {}
    return (f"{language}: held-out sentences identified {_fmt(model.get('dtw_identification'))} (the codec's ceiling "
            f"{_fmt(codec.get('dtw_identification'))}, chance {_fmt(evaluation['chance'])}), MCD "
            f"{_fmt(model.get('mcd_db'), 3)} dB, failure flags {_flags_words(evaluation)}.")


def _base_language_markdown(section: dict[str, Any] | None) -> list[str]:
    """Return the report.md section on the base language: the summary line, then both checkpoints' numbers."""
    if not section:
        return []
    verdict = section.get("verdict") or {}
    limits = verdict.get("thresholds") or {}
    lines = ["## English kept (the base language)", "", section.get("summary") or base_language_summary(section), "",
             *([f"Verdict: **{verdict['verdict']}**. {verdict['words']}", "",
                f"*Kept*: the validation loss rose at most {limits['kept_loss_rise']:.0%} and the held-out sentences' "
                f"identification fell at most {limits['kept_identification_drop']:.0%}; *lost*: the loss rose more than "
                f"{limits['lost_loss_rise']:.0%} or identification fell by more than "
                f"{limits['lost_identification_drop']:.0%}; *degraded*: between.", ""] if verdict else []),
             *_table(["", "validation loss", "validation speech loss", "validation text loss"], [
                 ["start of the fine-tune", section["val_base_loss_start"], section["val_base_mel_loss_start"],
                  section["val_base_text_loss_start"]],
                 ["end of the fine-tune", section["val_base_loss_end"], section["val_base_mel_loss_end"],
                  section["val_base_text_loss_end"]]])]
    rows = []
    for label, evaluation in (("English base model", section.get("before")), ("final Amharic model", section.get("after"))):
        if evaluation:
            model, codec = evaluation["rows"]["model"], evaluation["rows"].get("codec") or {}
            rows.append([label, evaluation["step"], model.get("dtw_identification"), codec.get("dtw_identification"),
                         model.get("sphinx_identification"), model.get("mcd_db"), _flags_words(evaluation)])
    if rows:
        sentences = (section.get("after") or section["before"])["sentences"]
        lines += [f"Held-out English sentences ({sentences}, never in training), the same measures as Amharic:", "",
                  *_table(["checkpoint", "step", "DTW identification", "codec ceiling", "PocketSphinx identification",
                           "MCD dB", "flags raised"], rows)]
    return lines


def _lm_markdown(report: dict[str, Any]) -> list[str]:
    sweep = report["sweep"]
    lines = ["## Vocabulary sweep", "", f"Recommended: **{sweep['recommended']}** — {sweep['reason']}", "",
             *_table(["size", "chars/token", "unused share", "error"],
                     [[r["size"], r.get("chars_per_token"), r.get("unused_share"), r.get("error")] for r in sweep["rows"]]),
             "## Language models (validation bits per byte; lower is better)", "",
             *_table(["vocab size", "steps", "val bpb start", "val bpb end", "val loss end", "checkpoint"],
                     [[m["vocab_size"], m["steps"], m["val_bpb_start"], m["val_bpb_end"], m["val_loss_end"],
                       m["checkpoint"]] for m in report["models"]]),
             f"Best by validation bits per byte: **{report['best_vocab_size']}**.", "",
             "## Samples", ""]
    for sample in report["samples"]:
        lines += [f"- temperature {sample['temperature']} (vocab {sample['vocab_size']}): "
                  f"“{sample['prompt']}**{sample['text']}**”"]
    return lines + [""]


def render_markdown(report: dict[str, Any], run_dir: Path) -> str:
    """Return report.md's text for a tts or lm quickstart report."""
    lines = [f"# Quickstart {report['journey']}: {report['name']}", "",
             f"Preset `{report['preset']}`, stages run {'as jobs' if report['mode'] == 'queue' else 'inline'}, "
             f"{report['seconds']} s in all.", "",
             f"<details><summary>The same run from the command line</summary>\n\n`{report['command']}`\n\n</details>", ""]
    lines += _tts_markdown(report, run_dir) if report["journey"] == "tts" else _lm_markdown(report)
    return "\n".join(lines + _stages(report))


def write_report(run_dir: Path, report: dict[str, Any]) -> dict[str, str]:
    """Write `report.json` and `report.md` into `run_dir`; return their paths (also added to `report`)."""
    run = RunFolder(run_dir)
    paths = {"json": str(run.report_json), "markdown": str(run.report_markdown)}
    report["report"] = paths
    atomic_write_json(run.report_json, report)
    atomic_write_text(run.report_markdown, render_markdown(report, run_dir))
    return paths

"""One eval.json entry for two languages: the new language's `eval tts` result with a `sections` record per
language — what periodic evaluation writes and what `eval tts --base-sentences` writes — so every reader
(the Quality tab, Compare, the quality score) finds the base language's numbers in the same place."""

from __future__ import annotations

from typing import Any

# what a section summary keeps of an `eval tts` result's model row and quality section
SECTION_ROW_KEYS = ("mcd_db", "dtw_identification", "wer")
SECTION_QUALITY_KEYS = ("flags_raised", "speaker_similarity", "mos_estimate", "cer")
NEW_LANGUAGE, BASE_LANGUAGE = "new_language", "base_language"


def section_summary(result: dict[str, Any], section: dict[str, Any]) -> dict[str, Any]:
    """Return one language's numbers of an `eval tts` `result`: `section` (the eval set's summary of it:
    role, language, asked, used, speakers, note), `chance`, the model row's MCD, DTW identification and
    WER, and the quality section's flags raised, speaker similarity, MOS estimate and CER."""
    model = (result.get("rows") or {}).get("model") or {}
    quality = result.get("quality") or {}
    return {**section, "chance": result.get("chance"), **{k: model.get(k) for k in SECTION_ROW_KEYS},
            **{k: quality.get(k) for k in SECTION_QUALITY_KEYS}}


def entry_with_sections(new: dict[str, Any], base: dict[str, Any] | None, eval_set: dict[str, Any]) -> dict[str, Any]:
    """Return the eval.json entry of one evaluation in two languages: the new-language `eval tts` result `new`
    (its rows, quality and audio stay at the top, where every reader finds them) with `eval_set` (the
    set's summary) and `sections` — `new_language` and, when evaluated, `base_language` (its summary
    plus the base result's `rows`, `quality` and `audio`); a base section the set skipped appears with
    its note only."""
    by_role = {s["role"]: s for s in eval_set["sections"]}
    sections = {NEW_LANGUAGE: section_summary(new, by_role[NEW_LANGUAGE])}
    if base is not None:
        sections[BASE_LANGUAGE] = {**section_summary(base, by_role[BASE_LANGUAGE]),
                                   **{k: base.get(k) for k in ("rows", "quality", "audio")}}
    elif BASE_LANGUAGE in by_role:
        sections[BASE_LANGUAGE] = by_role[BASE_LANGUAGE]
    return {**new, "eval_set": eval_set, "sections": sections}

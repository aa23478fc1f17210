"""A run's fixed evaluation set: chosen once, at the run's first evaluation, kept in `eval_set.json`.

Every periodic evaluation of a run (`schedule.eval_every`) speaks the same sentences: the set is
chosen deterministically the first time (`choose_eval_set`), written into the run folder
(`RunFolder.eval_set_file`), and read back unchanged by every later evaluation and after a resume
(`fixed_eval_set`). It has one section per language:

- `new_language`: `eval.count` sentences (default 20) in `eval.language`, else the val split's most
  common language other than `eval.base_language`; or the first `eval.count` lines of `eval.sentences`;
- `base_language`: `eval.base_count` sentences (default 10) in `eval.base_language`, from the val
  split; when that has fewer than 2 base-language clips and the run replays base-language data
  (`data.replay.manifest`), from the replay manifest's val split — the clips `val_base_loss` is
  measured on (absent when neither has them or `base_count` is 0).

Sentences come from the run's own val split (`data.split: speaker` = the clips of held-out speakers,
`core.data.splits.val_rows`), ordered by a hash of the clip id (stable: adding clips never reorders
the old ones) — never at random. A section with fewer clips than asked takes what there is and
says so in its `note`; one with fewer than 2 is skipped (`note` says why).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from core.config import Settings
from core.errors import InputError
from core.eval.sections import BASE_LANGUAGE, NEW_LANGUAGE
from core.fsutil import atomic_write_json, read_json
from core.runs import RunFolder
from core.training.run_config import RunConfig

EVAL_SET_VERSION = 1
MIN_SENTENCES = 2  # DTW identification needs at least two sentences to choose among


@dataclass
class EvalSection:
    """The sentences of one language in the evaluation set, with their references."""

    role: str  # new_language | base_language
    language: str
    asked: int
    sentences: list[str]
    references: Any  # `espeak`, a folder of `<n>.wav` clips, or one clip path per sentence
    speakers: list[str] = field(default_factory=list)
    note: str | None = None

    @property
    def usable(self) -> bool:
        """Return whether the section has enough sentences to evaluate."""
        return len(self.sentences) >= MIN_SENTENCES

    def summary(self) -> dict[str, Any]:
        """Return the section without its sentences and references: role, language, asked, used, speakers, note."""
        return {"role": self.role, "language": self.language, "asked": self.asked, "used": len(self.sentences),
                "speakers": self.speakers, "note": self.note}


@dataclass
class EvalSet:
    """The whole fixed evaluation set of a run."""

    source: str
    split: str
    speakers_held_out: bool
    chosen_at_step: int
    chosen_for: dict[str, Any]
    sections: list[EvalSection]
    note: str | None = None
    version: int = EVAL_SET_VERSION

    def section(self, role: str) -> EvalSection | None:
        """Return the section of `role` (new_language | base_language), None when the set has none."""
        return next((s for s in self.sections if s.role == role), None)

    def to_dict(self) -> dict[str, Any]:
        """Return the set as the JSON object of eval_set.json."""
        return asdict(self)

    def summary(self) -> dict[str, Any]:
        """Return what an eval.json entry records of the set: source, split, held-out speakers, step chosen, sections."""
        return {"source": self.source, "split": self.split, "speakers_held_out": self.speakers_held_out,
                "chosen_at_step": self.chosen_at_step, "note": self.note,
                "sections": [s.summary() for s in self.sections]}


def eval_spec(config: RunConfig) -> dict[str, Any]:
    """Return the run-config values an evaluation set is chosen by (recorded in eval_set.json as `chosen_for`)."""
    spec = config.eval
    return {"manifest": config.data.manifest, "val_ratio": config.data.val_ratio, "split": config.data.split,
            "sentences": spec.sentences, "references": spec.references, "count": spec.count,
            "base_count": spec.base_count, "language": spec.language, "base_language": spec.base_language}


def _hash_order(rows: list[Any]) -> list[Any]:
    return sorted(rows, key=lambda r: (hashlib.sha256(r.id.encode("utf-8")).hexdigest(), r.id))


def _shortfall(found: int, asked: int, language: str, where: str) -> str | None:
    if found >= asked:
        return None
    if found < MIN_SENTENCES:
        return (f"skipped: {found} {language} sentence(s) in {where}, evaluation needs at least {MIN_SENTENCES} "
                f"({asked} asked)")
    return f"{found} of {asked} asked {language} sentences: {where} holds no more"


def _references(spec_references: str, clips: list[str] | None, settings: Settings, where: str) -> Any:
    from core.eval.tts import ESPEAK

    if spec_references == "dataset":
        if clips is None:
            raise InputError(f"{where}: eval.references dataset needs a manifest.jsonl; use espeak or a folder.")
        return clips
    if spec_references == ESPEAK:
        return ESPEAK
    return str(settings.resolve(spec_references))


def _section_from_rows(role: str, rows: list[Any], language: str, asked: int, references: str, settings: Settings,
                       where: str) -> EvalSection:
    chosen = _hash_order([r for r in rows if r.language == language])[:asked]
    return EvalSection(role, language, asked, [r.text for r in chosen],
                       _references(references, [str(r.path) for r in chosen], settings, where),
                       sorted({r.speaker for r in chosen if r.speaker}), _shortfall(len(chosen), asked, language, where))


def _new_language(config: RunConfig, held: list[Any], everything: list[Any]) -> str:
    """Return the new language: `eval.language`, else the most common non-base language of the val split
    (then of the whole manifest), else the base language itself (the data speaks nothing else)."""
    if config.eval.language:
        return config.eval.language
    base = config.eval.base_language
    for rows in (held, everything):
        counts = Counter(r.language for r in rows if r.language != base)
        if counts:
            return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
    return base


def choose_eval_set(config: RunConfig, settings: Settings, step: int) -> EvalSet:
    """Return the evaluation set `config` asks for (deterministic; see the module docstring), chosen at `step`.

    Raises InputError when the sentences file or manifest cannot be read, the split cannot be made
    (by speaker with fewer than two speakers), or `references: dataset` has no clips to use.
    """
    from core.data.manifest import load_manifest_rows
    from core.data.splits import val_rows
    from core.eval.tts import read_sentences

    spec, data = config.eval, config.data
    rows: list[Any] = []
    held: list[Any] = []
    if data.manifest:
        rows = load_manifest_rows(settings.resolve(data.manifest))
        held = val_rows(rows, data.val_ratio, data.split)
    elif not spec.sentences:
        raise InputError(f"{config.source}: periodic eval needs data.manifest or eval.sentences.")
    split_words = "held-out speakers" if data.split == "speaker" else "val split"
    where = f"{data.manifest} ({split_words})"
    sections = []
    if spec.sentences:
        sentences, clips = read_sentences(settings.resolve(spec.sentences))
        language = spec.language or "en"
        kept = sentences[: spec.count]
        sections.append(EvalSection(NEW_LANGUAGE, language, spec.count, kept,
                                    _references(spec.references, [str(c) for c in clips[: spec.count]] if clips else None,
                                                settings, str(spec.sentences)),
                                    note=_shortfall(len(kept), spec.count, language, str(spec.sentences))))
        source = f"{spec.sentences} (new language); {where} (base language)" if data.manifest else str(spec.sentences)
    else:
        language = _new_language(config, held, rows)
        sections.append(_section_from_rows(NEW_LANGUAGE, held, language, spec.count, spec.references, settings, where))
        source = where
    base = spec.base_language
    note = None
    if base == language:
        note = f"no base-language section: the new language is the base language {base!r} (eval.base_language)"
    elif spec.base_count == 0:
        note = "no base-language section: eval.base_count is 0"
    elif not data.manifest:
        note = "no base-language section: it comes from data.manifest's val split, and the run has none"
    else:
        references = "espeak" if spec.references == "espeak" else "dataset"
        base_rows, base_where = held, where
        if data.replay.manifest and sum(1 for r in held if r.language == base) < 2:
            # the replay's own val split, split as the trainer splits it for `val_base_loss`
            base_rows = val_rows(load_manifest_rows(settings.resolve(data.replay.manifest)), data.val_ratio, data.split)
            base_where = f"{data.replay.manifest} (replay, {split_words})"
            source = f"{source}; {base_where} (base language)"
        sections.append(_section_from_rows(BASE_LANGUAGE, base_rows, base, spec.base_count, references, settings, base_where))
    speakers = {r.speaker for r in rows if r.speaker}
    if data.split != "speaker" and len(speakers) > 1 and not spec.sentences:
        split_note = ("split by clip: the evaluation speakers also speak in training; data.split: speaker holds "
                      "whole speakers out")
        note = f"{note}; {split_note}" if note else split_note
    return EvalSet(source, data.split, data.split == "speaker" and not spec.sentences, step, eval_spec(config),
                   sections, note)


def eval_set_from_dict(data: dict[str, Any]) -> EvalSet:
    """Return the EvalSet stored as `data` (eval_set.json). Raises InputError when it is not one."""
    try:
        sections = [EvalSection(**s) for s in data["sections"]]
        return EvalSet(**{**data, "sections": sections})
    except (KeyError, TypeError) as exc:
        raise InputError(f"eval_set.json: not an evaluation set ({exc}). Delete it to choose the set again.") from exc


def fixed_eval_set(folder: RunFolder, config: RunConfig, settings: Settings, step: int) -> tuple[EvalSet, bool]:
    """Return (the run's evaluation set, whether it was chosen now): the one in `folder`'s eval_set.json,
    else one chosen at `step` by `choose_eval_set` and written there.

    Raises InputError from `choose_eval_set`, or for an eval_set.json that is unreadable or not an
    evaluation set.
    """
    if folder.eval_set_file.exists():
        stored = read_json(folder.eval_set_file)
        if stored is None:
            raise InputError(f"{folder.eval_set_file}: unreadable; the run's evaluation set is kept there. Restore it, "
                             "or delete it to choose the set again (earlier evaluations then used another set).")
        return eval_set_from_dict(stored), False
    chosen = choose_eval_set(config, settings, step)
    atomic_write_json(folder.eval_set_file, chosen.to_dict())
    return chosen, True

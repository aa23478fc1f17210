"""Keeping the base languages on the published families (issue 45, item 5): a reduced two-language base per family,
extended to Amharic and fine-tuned with the default retention, each base language's validation loss before and after.

Per family (Chatterbox, Chatterbox-Turbo, CSM, IndexTTS2; random-initialised reduced published folders, the test
suite's builders):

1. the base: the folder's model trained from its published weights on English + Spanish espeak-ng speech
   (`core.data.sample`, two voices per language), every weight trained, with the folder's own tokenizer — or, for a
   family whose tokenizer tags every language but English (Turbo) or lacks Spanish's letters (IndexTTS2's
   `bpe.model`: `FamilySpec.base_tag`), the folder's tokenizer grown with Spanish pieces (and the `[es]` tag for an
   HF tokenizer) and the published weights extended to it, as a user teaching the release Spanish first would;
2. the extension: the folder's tokenizer grown with Amharic pieces — an HF tokenizer.json merged with them and the
   `[am]` tag (`merge_hf_tokenizer`), a SentencePiece model extended by them (`extend_sentencepiece`, what
   `tokenizer extend` runs; SentencePiece has no tags), English protected by its built-in lexicon and the Spanish
   sentences as protect lines — and the base's final checkpoint extended to it (new rows the mean:
   `extend_checkpoint`);
3. the fine-tune on Amharic from that checkpoint, once per strategy (core.training.retention): `replay` — the
   default, DEFAULT_RETENTION: the base text rows frozen and its share of each batch English + Spanish clips
   from the base's training split — and, for comparison, `frozen` (the base rows frozen, Amharic alone);
4. the measures: each language's validation loss (teacher-forced, its manifest's val split, the same clips
   before and after) of the extended checkpoint and of each fine-tune's final one, the change, and the verdict on
   each base language by the loss (core.eval.quality.retention). The issue's target: each base language's loss
   at most +15 % after the fine-tune with the default retention.

    LINGUAFORGE_WORKSPACE=W .venv/bin/python bench/retention_families.py --json out.json --markdown
    .venv/bin/python bench/retention_families.py --from-json a.json b.json   # one table of several reports
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from core.config import Settings, load_settings  # noqa: E402
from core.data.sample import sample_dataset  # noqa: E402
from core.data.sample_text import AMHARIC_SENTENCES, SPANISH_SENTENCES  # noqa: E402
from core.eval.quality.retention import retention_verdict  # noqa: E402
from core.recipe import prepare_trainer, train  # noqa: E402
from core.tokenizers.hf_merge import merge_hf_tokenizer  # noqa: E402
from core.tokenizers.sp_extend import extend_sentencepiece  # noqa: E402
from core.tokenizers.tokenizer import SENTENCEPIECE, load_tokenizer  # noqa: E402
from core.training.embeddings import extend_checkpoint  # noqa: E402
from core.training.retention import DEFAULT_RETENTION, retention_overlay  # noqa: E402
from core.training.run_config import run_config_from_dict  # noqa: E402

BASE_LANGUAGES = ("en", "es")
NEW_LANGUAGE = "am"
SAMPLE_RATE = 16000
TARGET_RISE = 0.15  # issue 45: each base language's loss at most +15 % with the default retention
COMPARED = ("replay", "frozen")  # the default retention, then the same fine-tune without replay


@dataclass(frozen=True)
class FamilySpec:
    """How to build and extend one family's reduced published folder: the folder builder (the test suite's),
    its tokenizer inside the folder (`.` for a tokenizer folder), the merge's size (an HF tokenizer: the new
    language's BPE vocabulary; a SentencePiece model: the pieces added), the run-config keys the family's runs
    add and the learning rate; `base_tag`: the published weights file to extend to a Spanish merge (with the `[es]`
    tag for an HF tokenizer) before the base trains (a family whose text rule refuses an untagged language other
    than English once its tokenizer has tags, or whose tokenizer lacks Spanish's letters), else None; `settings`:
    the `families.<family>` settings the reduced folder needs, else None; `text`: the family's text front end
    (the form its tokenizer sees: the corpus and protect lines are grown in it), else None (the text as written)."""

    build: Callable[[Path], Path]
    tokenizer: str
    vocab_size: int
    extra: dict[str, Any] = field(default_factory=dict)
    lr: float = 2.0e-3
    base_tag: str | None = None
    settings: Callable[[], dict[str, Any]] | None = None
    text: Callable[[], Callable[[str], str]] | None = None


def _chatterbox(dest: Path) -> Path:
    from tests.chatterbox_helpers import make_chatterbox_folder
    return make_chatterbox_folder(dest)


def _turbo(dest: Path) -> Path:
    from tests.turbo_helpers import make_turbo_folder
    return make_turbo_folder(dest)


def _csm(dest: Path) -> Path:
    from tests.csm_helpers import make_csm_folder
    return make_csm_folder(dest)


def _indextts(dest: Path) -> Path:
    from tests.indextts_helpers import build_model_folder
    return build_model_folder(dest)


def _indextts_settings() -> dict[str, Any]:
    from tests.indextts_helpers import W2V_LAYERS
    return {"w2v_layer": W2V_LAYERS}  # the reduced w2v-BERT's last layer (the published one reads 17)


def _indextts_text() -> Callable[[str], str]:
    from core.families.indextts.gpt import IndexTextNormalizer
    return IndexTextNormalizer().normalize  # upper-case, as IndexTTS2's bpe.model was trained


FAMILIES: dict[str, FamilySpec] = {
    "chatterbox": FamilySpec(_chatterbox, "grapheme_mtl_merged_expanded_v1.json", 400),
    "chatterbox-turbo": FamilySpec(_turbo, ".", 600, {"model": {"dropout": 0.0}}, 3.0e-3, "t3_turbo_v1.safetensors"),
    "csm": FamilySpec(_csm, "tokenizer.json", 600, {"model": {"dropout": 0.0}}, 3.0e-3),
    "indextts": FamilySpec(_indextts, "bpe.model", 600, {}, 3.0e-3, "gpt.pth", _indextts_settings,
                           _indextts_text),
}


def speech_data(folder: Path, per_language: int) -> dict[str, str]:
    """Render `per_language` espeak clips of English, Spanish and Amharic into `folder` (once: a folder that holds
    them is reused) and write one manifest per language and `base.jsonl` (English + Spanish) beside the import's
    manifest; return {language or "base": manifest path}."""
    manifest = folder / "manifest.jsonl"
    if not manifest.is_file():
        sample_dataset(folder, SAMPLE_RATE, [*BASE_LANGUAGES, NEW_LANGUAGE], per_language)
    rows = [json.loads(line) for line in manifest.read_text(encoding="utf-8").splitlines() if line.strip()]
    paths = {}
    for name, languages in [*((lang, (lang,)) for lang in (*BASE_LANGUAGES, NEW_LANGUAGE)), ("base", BASE_LANGUAGES)]:
        path = folder / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows if r["language"] in languages),
                        encoding="utf-8")
        paths[name] = str(path)
    return paths


class FamilyBench:
    """One family's base, extension, fine-tunes and measures, in the workspace folder `out` (all run paths stay in
    the workspace)."""

    def __init__(self, family: str, out: Path, data: dict[str, str], settings: Settings, batch: int = 8,
                 val_ratio: float = 0.2) -> None:
        self.family, self.spec, self.settings = family, FAMILIES[family], settings
        self.out, self.data, self.batch, self.val_ratio = out, data, batch, val_ratio
        self.prefix = f"{out.parent.name}-{family}"  # run names: two bench folders of one workspace never share a run
        self.model_dir = self.spec.build(out / "model")
        self.base_tokenizer = (self.model_dir / self.spec.tokenizer).resolve()
        if self.spec.settings:
            families = settings.data.setdefault("families", {})
            families[family] = {**(families.get(family) or {}), **self.spec.settings()}

    def config(self, name: str, manifest: str, steps: int, tokenizer: Path, checkpoint: str | None,
               overlay: dict[str, Any], lr: float | None = None) -> Any:
        """Return the run config of `steps` steps on `manifest` from `checkpoint` (the folder's weights when None)."""
        data = {"name": name, "family": self.family, "model_dir": str(self.model_dir), "tokenizer": str(tokenizer),
                **json.loads(json.dumps(self.spec.extra)),
                "data": {"manifest": manifest, "val_ratio": self.val_ratio, "prefetch": 0, **overlay.get("data", {})},
                "freeze": {**overlay["freeze"], "until": "auto"},
                "optim": {"lr": lr or self.spec.lr, "weight_decay": 0.1, "warmup_steps": max(1, steps // 20),
                          "schedule": "constant"},
                "batch": {"size": self.batch}, "seed": 0,
                "schedule": {"max_steps": steps, "val_every": steps, "save_every": steps, "keep_last": 1,
                             "log_every": max(1, steps // 10)}}
        if checkpoint:
            data["base_checkpoint"] = checkpoint
        return run_config_from_dict(data, f"{name}.yaml")

    def run(self, config: Any) -> tuple[str, float]:
        """Train `config` afresh; return its last checkpoint and wall seconds."""
        started = time.time()
        shutil.rmtree(self.settings.workspace / "runs" / config.name, ignore_errors=True)
        result = train(config, settings=self.settings)
        return str(result.last_checkpoint), round(time.time() - started, 1)

    def base(self, steps: int) -> tuple[str, float]:
        """Train the two-language base (every weight, English + Spanish) from the folder's weights (extended to the
        `[es]` tag first for a family with `base_tag`; the tagged tokenizer is then the base of the Amharic merge)."""
        start = None
        if self.spec.base_tag:
            start, self.base_tokenizer = self.merge_and_extend(
                "es", SPANISH_SENTENCES, [], str(self.model_dir / self.spec.base_tag))
        return self.run(self.config(f"{self.prefix}-base", self.data["base"], steps, self.base_tokenizer, start,
                                    {"freeze": {"mode": "none"}}))

    def merge_and_extend(self, language: str, corpus: Sequence[str], protect: list[str], checkpoint: str) -> tuple[str, Path]:
        """Grow the base tokenizer with `language`'s pieces (trained on `corpus`), `protect` lines and English kept —
        an HF tokenizer merged with them and the language's tag, a SentencePiece model extended by them — and extend
        `checkpoint` to it (new rows the mean); return (the extended checkpoint, the grown tokenizer)."""
        form = self.spec.text() if self.spec.text else str
        corpus, protect = [form(line) for line in corpus], [form(line) for line in protect]
        sentencepiece = self.base_tokenizer.is_file() and load_tokenizer(self.base_tokenizer).kind == SENTENCEPIECE
        tokenizer = self.out / "tokenizers" / f"{language}{'.model' if sentencepiece else '.json'}"
        tokenizer.parent.mkdir(parents=True, exist_ok=True)
        if sentencepiece:
            extend_sentencepiece(self.base_tokenizer, corpus, load_tokenizer(self.base_tokenizer).size
                                 + self.spec.vocab_size, tokenizer, protect_lines=protect)
        else:
            merge_hf_tokenizer(self.base_tokenizer, tokenizer, corpus_lines=corpus,
                               vocab_size=self.spec.vocab_size, language_tag=language, protect_lines=protect)
        start = self.out / "checkpoints" / f"start_{language}.safetensors"
        start.parent.mkdir(parents=True, exist_ok=True)
        extend_checkpoint(checkpoint, self.base_tokenizer, tokenizer, start, family=self.family, init="mean")
        return str(start), tokenizer

    def extend(self, checkpoint: str) -> tuple[Path, Path]:
        """Merge Amharic into the base's tokenizer and extend `checkpoint` to it; return (tokenizer, checkpoint)."""
        start, tokenizer = self.merge_and_extend(NEW_LANGUAGE, AMHARIC_SENTENCES, list(SPANISH_SENTENCES), checkpoint)
        return tokenizer, Path(start)

    def losses(self, checkpoint: str, tokenizer: Path, label: str) -> dict[str, float]:
        """Return each language's validation loss of `checkpoint` (its manifest's val split)."""
        out = {}
        for lang in (*BASE_LANGUAGES, NEW_LANGUAGE):
            config = self.config(f"{self.prefix}-{label}-val-{lang}", self.data[lang], 1, tokenizer, checkpoint,
                                 {"freeze": {"mode": "none"}})
            out[lang] = round(float(prepare_trainer(config, None, self.settings).validate()["loss"]), 4)
        return out

    def fine_tune(self, strategy: str, tokenizer: Path, start: Path, steps: int) -> tuple[str, float]:
        """Fine-tune Amharic from `start` with the retention `strategy` (replay at the default share)."""
        overlay = retention_overlay(strategy, self.data["base"])
        return self.run(self.config(f"{self.prefix}-{strategy}", self.data[NEW_LANGUAGE], steps, tokenizer, str(start),
                                    overlay))


def measure(bench: FamilyBench, base_steps: int, steps: int, strategies: tuple[str, ...] = COMPARED) -> dict[str, Any]:
    """Train the base, extend it and fine-tune it under each strategy; return the family's record."""
    checkpoint, base_wall = bench.base(base_steps)
    tokenizer, start = bench.extend(checkpoint)
    before = bench.losses(str(start), tokenizer, "start")
    rows = []
    for strategy in strategies:
        final, wall = bench.fine_tune(strategy, tokenizer, start, steps)
        after = bench.losses(final, tokenizer, strategy)
        change = {lang: round((after[lang] - before[lang]) / before[lang], 4) for lang in after}
        verdicts = {lang: retention_verdict(lang, change[lang]) for lang in BASE_LANGUAGES}
        rows.append({"strategy": strategy, "share": DEFAULT_RETENTION["share"] if strategy == "replay" else None,
                     "val_loss": after, "change": change, "train_wall_s": wall,
                     "verdict": {lang: v["verdict"] for lang, v in verdicts.items()},
                     "words": {lang: v["words"] for lang, v in verdicts.items()},
                     "within_target": all(change[lang] <= TARGET_RISE for lang in BASE_LANGUAGES)})
    return {"family": bench.family, "base_steps": base_steps, "steps": steps, "base_wall_s": base_wall,
            "val_loss_start": before, "rows": rows}


def markdown(report: dict[str, Any]) -> str:
    """Return the table of docs/benchmarks.md: one row per family and strategy."""
    lines = ["| family | strategy | English val loss | Spanish val loss | verdict (en / es) | Amharic val loss | "
             f"≤ +{TARGET_RISE:.0%} | base s | fine-tune s |", "|" + "---|" * 9]
    for record in report["families"]:
        start = record["val_loss_start"]
        for row in record["rows"]:
            cells = [f"{start[lang]:.3f} → {row['val_loss'][lang]:.3f} ({row['change'][lang]:+.1%})"
                     for lang in (*BASE_LANGUAGES, NEW_LANGUAGE)]
            name = f"replay {row['share']:.0%}" if row["share"] else "frozen, no replay"
            lines.append(f"| {record['family']} | {name} | {cells[0]} | {cells[1]} | "
                         f"{row['verdict']['en']} / {row['verdict']['es']} | {cells[2]} | "
                         f"{'yes' if row['within_target'] else 'no'} | {record['base_wall_s']} | {row['train_wall_s']} |")
    return "\n".join(lines)


def main() -> int:
    """Measure the families named (all by default) and write the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", nargs="+", choices=list(FAMILIES), default=list(FAMILIES))
    parser.add_argument("--base-steps", type=int, default=300, help="steps of the English + Spanish base")
    parser.add_argument("--steps", type=int, default=150, help="steps of each Amharic fine-tune")
    parser.add_argument("--per-language", type=int, default=40, help="espeak clips per language")
    parser.add_argument("--batch", type=int, default=8, help="batch size (replay takes its share of it)")
    parser.add_argument("--no-compare", action="store_true", help="the default retention only (no run without replay)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--out", default="bench/retention-families", help="workspace folder for models, data and checkpoints")
    parser.add_argument("--json", type=Path, help="write the report here (after every family)")
    parser.add_argument("--markdown", action="store_true", help="print the table")
    parser.add_argument("--from-json", nargs="+", type=Path, help="print one table of these reports; measure nothing")
    args = parser.parse_args()
    if args.from_json:
        reports = [json.loads(path.read_text(encoding="utf-8")) for path in args.from_json]
        print(markdown({"families": [record for report in reports for record in report["families"]]}))
        return 0
    torch.set_num_threads(args.threads)
    settings = load_settings()
    out = settings.workspace / args.out
    data = speech_data(out / "data", args.per_language)
    started = time.time()
    report: dict[str, Any] = {"families": []}
    for family in args.families:
        bench = FamilyBench(family, out / family, data, settings, args.batch)
        report["families"].append(measure(bench, args.base_steps, args.steps, COMPARED[:1] if args.no_compare else COMPARED))
        report.update(seconds=round(time.time() - started, 1), per_language=args.per_language, batch=args.batch,
                      load_average=os.getloadavg(), cpu_count=os.cpu_count(), threads=args.threads,
                      python=sys.version.split()[0])
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(report, indent=1))
    if args.markdown:
        print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Base-language drift on held-out text after extending a tokenizer, with and without the default protection.

Two cases from issue 16: IndexTTS2's `bpe.model` extended with Spanish (the built-in Spanish
sentences plus the 20,000 most frequent Spanish words from wordfreq, upper-cased), and Amharic (the
built-in sentences plus 120 lines with years and prices) merged into Chatterbox's 2,454-token
tokenizer. Held-out English, never protected: the 330 built-in English sentences plus 70 lines
with numbers. Reports the share of held-out lines whose ids change, the pieces added and pruned,
and the new language's unk rate.

    .venv/bin/python bench/drift.py --size 1000 --json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from core.data.sample_text import AMHARIC_SENTENCES, ENGLISH_SENTENCES, SPANISH_SENTENCES  # noqa: E402
from core.tokenizers.hf_merge import merge_hf_tokenizer  # noqa: E402
from core.tokenizers.report import lines_without_unk, measure_drift  # noqa: E402
from core.tokenizers.sp_extend import extend_sentencepiece  # noqa: E402
from core.tokenizers.tokenizer import load_tokenizer  # noqa: E402

FIXTURES = REPO_ROOT / "tests" / "fixtures"
HELDOUT_EN = list(ENGLISH_SENTENCES) + [f"In {1950 + i} the fare rose to {i * 3 % 97} cents, page {i * 11}." for i in range(70)]
AMHARIC = list(AMHARIC_SENTENCES) + [f"በ{1900 + i} ዓ.ም. {i * 7} ብር ከ{i % 60} ደቂቃ" for i in range(120)]


def _row(name: str, protect: str, base_path: Path, out: Path, report: dict, heldout: list[str], seconds: float) -> dict:
    base = load_tokenizer(base_path)
    drift = measure_drift(base, load_tokenizer(out), lines_without_unk(base, heldout))
    return {"case": name, "protect_language": protect, "heldout_lines": drift.lines_checked,
            "heldout_changed": drift.lines_changed, "heldout_rate": round(drift.rate, 4),
            "pieces_added": report["pieces_added"], "candidates_available": report["candidates_available"],
            "candidates_pruned": report["candidates_pruned"], "merges_pruned": report.get("merges_pruned"),
            "unk_rate_new_language": report["unk_rate"], "seconds": round(seconds, 1)}


def main() -> None:
    """Run both cases with --protect-language none and en; print one row per run."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=1000, help="pieces to add (SentencePiece) / addition vocab size (HF)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from wordfreq import top_n_list

    words = top_n_list("es", 20_000)
    spanish = [s.upper() for s in SPANISH_SENTENCES] + [" ".join(words[i:i + 12]).upper() for i in range(0, 20_000, 12)]
    rows = []
    with tempfile.TemporaryDirectory(prefix="lf-bench-drift-") as tmp:
        for protect in ("none", "en"):
            out = Path(tmp) / f"es_{protect}.model"
            start = time.perf_counter()
            report = extend_sentencepiece(FIXTURES / "indextts2" / "bpe.model", spanish, 12_000 + args.size, out,
                                          protect_language=protect)
            rows.append(_row("indextts2 bpe.model + Spanish", protect, FIXTURES / "indextts2" / "bpe.model", out,
                             report, [s.upper() for s in HELDOUT_EN], time.perf_counter() - start))
            out = Path(tmp) / f"am_{protect}.json"
            start = time.perf_counter()
            report = merge_hf_tokenizer(FIXTURES / "chatterbox" / "tokenizer_mtl_2454.json", out, corpus_lines=AMHARIC,
                                        vocab_size=args.size, language_tag="am", protect_language=protect)
            rows.append(_row("chatterbox 2454 + Amharic", protect, FIXTURES / "chatterbox" / "tokenizer_mtl_2454.json",
                             out, report, HELDOUT_EN, time.perf_counter() - start))
    print(json.dumps(rows, indent=None if args.json else 2))


if __name__ == "__main__":
    main()

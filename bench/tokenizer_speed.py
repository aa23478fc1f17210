"""Tokenizer benchmark: train a 12k SentencePiece model, extend the IndexTTS2 base by 12k, encode.

Generates a deterministic Amharic-like corpus of about `--megabytes` MB (the built-in Amharic
sentences plus pseudo-words drawn from their syllable frequencies with a Zipf word distribution),
then times `train_tokenizer` (12,000 pieces), `extend_sentencepiece` (12,000 -> 24,000 on the
IndexTTS2 model from tests/fixtures) and the extended model's encoding throughput.

    .venv/bin/python bench/tokenizer_speed.py --megabytes 50 --json
"""

from __future__ import annotations

import json
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from itertools import accumulate
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from bench.common import bench_parser  # noqa: E402
from core.data.sample_text import AMHARIC_SENTENCES  # noqa: E402
from core.tokenizers.sp_extend import extend_sentencepiece  # noqa: E402
from core.tokenizers.tokenizer import load_tokenizer  # noqa: E402
from core.tokenizers.report import encode_many  # noqa: E402
from core.tokenizers.train import train_tokenizer  # noqa: E402

BASE_MODEL = REPO_ROOT / "tests" / "fixtures" / "indextts2" / "bpe.model"
LEXICON_SIZE = 80_000


def generate_corpus(megabytes: float, seed: int = 0) -> list[str]:
    """Return lines of Amharic-like text totalling about `megabytes` MB of UTF-8."""
    rng = random.Random(seed)
    syllables = Counter(c for s in AMHARIC_SENTENCES for c in s if "\u1200" <= c <= "\u137f" and c not in "።፣፤፦")
    alphabet, weights = zip(*syllables.items())
    syllable_cum = list(accumulate(weights))
    real_words = sorted({w.strip("።፣፤፦?") for s in AMHARIC_SENTENCES for w in s.split()} - {""})
    invented = {"".join(rng.choices(alphabet, cum_weights=syllable_cum, k=rng.choice((1, 2, 2, 3, 3, 3, 4, 4, 5))))
                for _ in range(LEXICON_SIZE)}
    lexicon = real_words + sorted(invented - set(real_words))
    rng.shuffle(lexicon)
    word_cum = list(accumulate(1.0 / (rank + 1) ** 1.05 for rank in range(len(lexicon))))
    target = int(megabytes * 1_000_000)
    lines: list[str] = []
    size = 0
    while size < target:
        if rng.random() < 0.1:
            line = rng.choice(AMHARIC_SENTENCES)
        else:
            words = rng.choices(lexicon, cum_weights=word_cum, k=rng.randint(4, 14))
            if len(words) > 6 and rng.random() < 0.4:
                words[len(words) // 2] += "፣"
            line = " ".join(words) + "።"
        lines.append(line)
        size += len(line.encode("utf-8")) + 1
    return lines


def run(megabytes: float, workdir: Path) -> dict:
    """Run the three measurements and return the figures."""
    started = time.perf_counter()
    lines = generate_corpus(megabytes)
    generate_s = time.perf_counter() - started
    corpus_bytes = sum(len(line.encode("utf-8")) + 1 for line in lines)

    started = time.perf_counter()
    trained = train_tokenizer(lines, "sentencepiece", 12_000, workdir / "am12k.model")
    train_s = time.perf_counter() - started

    base = workdir / "bpe.model"
    shutil.copyfile(BASE_MODEL, base)
    started = time.perf_counter()
    extended = extend_sentencepiece(base, lines, 24_000, workdir / "am24k.model")
    extend_s = time.perf_counter() - started

    tokenizer = load_tokenizer(workdir / "am24k.model")
    sample = lines[: max(1, len(lines) // 5)]
    started = time.perf_counter()
    tokens = sum(len(ids) for ids in encode_many(tokenizer, sample))
    batch_s = time.perf_counter() - started
    started = time.perf_counter()
    single_sample = sample[:20_000]
    for line in single_sample:
        tokenizer.encode(line)
    single_s = time.perf_counter() - started
    return {
        "corpus_mb": round(corpus_bytes / 1e6, 2),
        "corpus_lines": len(lines),
        "corpus_chars": sum(map(len, lines)),
        "generate_s": round(generate_s, 1),
        "train_12k_s": round(train_s, 1),
        "train_12k_size": trained["size"],
        "extend_12k_to_24k_s": round(extend_s, 1),
        "extend_new_size": extended["new_size"],
        "extend_reached_target": extended["reached_target"],
        "extend_characters_forced": extended["characters_forced"],
        "extend_candidates_available": extended["candidates_available"],
        "extend_unk_rate": extended["unk_rate"],
        "extend_added_pieces_used": extended["added_pieces_used"],
        "encode_batch_chars_per_s": round(sum(map(len, sample)) / batch_s),
        "encode_batch_tokens": tokens,
        "encode_single_chars_per_s": round(sum(map(len, single_sample)) / single_s),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
    }


def main() -> int:
    """Parse arguments, run the benchmark in a temporary folder and print the figures."""
    parser = bench_parser(__doc__)
    parser.add_argument("--megabytes", type=float, default=50.0, help="generated corpus size (default 50)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lf-bench-tok-") as folder:
        figures = run(args.megabytes, Path(folder))
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key:32} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Evaluation benchmark: what the judges of `eval tts` can tell, and how fast, on real espeak speech.

Held-out set: the first `--sentences` built-in English sentences. References are espeak-ng's
`en-us+m3` voice (the one `eval tts --references espeak` uses). Each condition below is scored
against them exactly as `eval tts` scores a checkpoint's clips:
  - references: the references themselves (the judges' own accuracy; distances are 0);
  - other voice: espeak `en-us+f3` at 145 words/min (same words, another voice and speed);
  - mel→Griffin-Lim: references through log-mel and Griffin-Lim without quantisation;
  - codec K=…: references through k-means codecs trained on the espeak sample set (the ceiling).
Throughput: seconds per clip of MCD-DTW, the DTW judge (one clip against all references),
PocketSphinx grammar identification and free decoding (on the first `--wer-clips` clips).

    .venv/bin/python bench/eval.py --sentences 30 --json
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import numpy as np  # noqa: E402

from bench.common import bench_parser  # noqa: E402
from core.audio import read_audio, resample  # noqa: E402
from core.data.codec_training import train_codec  # noqa: E402
from core.data.sample import espeak_binary, sample_dataset  # noqa: E402
from core.eval.asr import SphinxJudge, word_error_rate  # noqa: E402
from core.eval.metrics import SAMPLE_RATE, identification_accuracy, identify_by_dtw, mcd_dtw  # noqa: E402
from core.eval.tts import render_espeak_references  # noqa: E402
from core.data.sample_text import ENGLISH_SENTENCES  # noqa: E402


def render_other_voice(sentences: list[str], folder: Path) -> list:
    """Return 16 kHz renderings of `sentences` by espeak `en-us+f3` at 145 words per minute."""
    folder.mkdir(parents=True, exist_ok=True)
    clips = []
    for i, text in enumerate(sentences):
        dest = folder / f"{i:03d}.wav"
        subprocess.run([espeak_binary(), "-v", "en-us+f3", "-s", "145", "-w", str(dest), text], check=True)
        clips.append(read_audio(dest, SAMPLE_RATE)[0])
    return clips


def score(name: str, clips: list, references: list, sentences: list[str], judge: SphinxJudge, wer_clips: int) -> dict:
    """Return the numbers and per-clip timings of one condition."""
    row: dict = {"condition": name}
    start = time.perf_counter()
    row["mcd_db"] = round(float(np.mean([mcd_dtw(c, r) for c, r in zip(clips, references)])), 3)
    row["mcd_s_per_clip"] = round((time.perf_counter() - start) / len(clips), 4)
    start = time.perf_counter()
    row["dtw_identification"] = round(identification_accuracy(identify_by_dtw(clips, references)), 4)
    row["dtw_s_per_clip"] = round((time.perf_counter() - start) / len(clips), 4)
    start = time.perf_counter()
    row["sphinx_identification"] = round(identification_accuracy([judge.identify(c) for c in clips]), 4)
    row["sphinx_s_per_clip"] = round((time.perf_counter() - start) / len(clips), 4)
    if wer_clips:
        start = time.perf_counter()
        hypotheses = [judge.transcribe(c) for c in clips[:wer_clips]]
        row["wer"] = round(word_error_rate(sentences[:wer_clips], hypotheses), 4)
        row["wer_s_per_clip"] = round((time.perf_counter() - start) / wer_clips, 4)
    print(json.dumps(row), file=sys.stderr, flush=True)
    return row


def main() -> None:
    """Run the benchmark and print a Markdown table (or JSON with --json)."""
    parser = bench_parser(__doc__)
    parser.add_argument("--sentences", type=int, default=30, help="held-out sentences (chance = 1/N)")
    parser.add_argument("--codebooks", default="256,1024", help="codec sizes K to measure")
    parser.add_argument("--codec-clips", type=int, default=120, help="espeak sample clips the codecs train on")
    parser.add_argument("--wer-clips", type=int, default=5, help="clips per condition for free decoding WER (slow)")
    args = parser.parse_args()

    sentences = list(ENGLISH_SENTENCES[: args.sentences])
    with tempfile.TemporaryDirectory(prefix="lf-bench-eval-") as tmp:
        root = Path(tmp)
        reference_paths = render_espeak_references(sentences, "en", root / "references")
        references = [read_audio(p, SAMPLE_RATE)[0] for p in reference_paths]
        other = render_other_voice(sentences, root / "other")
        manifest = sample_dataset(root / "sample", SAMPLE_RATE, ["en"], args.codec_clips).manifest
        codecs = {int(k): train_codec(manifest, codebook_size=int(k), iterations=50) for k in args.codebooks.split(",")}
        any_codec = next(iter(codecs.values()))
        judge = SphinxJudge(sentences)
        rows = [
            score("references (judge accuracy)", references, references, sentences, judge, args.wer_clips),
            score("other espeak voice, 145 wpm", other, references, sentences, judge, args.wer_clips),
        ]
        start = time.perf_counter()
        griffin_lim = [resample(any_codec.mel_to_wav(any_codec.mel(r)), any_codec.sample_rate, SAMPLE_RATE) for r in references]
        gl_seconds = (time.perf_counter() - start) / len(references)
        rows.append(score("mel→Griffin-Lim, no quantisation", griffin_lim, references, sentences, judge, args.wer_clips))
        for size, codec in sorted(codecs.items(), reverse=True):
            through = [resample(codec.decode(codec.encode(r)), codec.sample_rate, SAMPLE_RATE) for r in references]
            rows.append(score(f"codec K={size} (ceiling)", through, references, sentences, judge, args.wer_clips))
    report = {
        "sentences": len(sentences),
        "chance": round(1 / len(sentences), 4),
        "griffin_lim_s_per_clip": round(gl_seconds, 3),
        "mean_reference_seconds": round(float(np.mean([r.numel() for r in references])) / SAMPLE_RATE, 2),
        "rows": rows,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, torch threads {__import__('torch').get_num_threads()}",
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{report['sentences']} sentences, chance {report['chance']}, {report['machine']}")
    print("| condition | MCD dB | DTW id | Sphinx id | WER | s/clip MCD | s/clip DTW | s/clip Sphinx id | s/clip WER |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['condition']} | {r['mcd_db']} | {r['dtw_identification']} | {r['sphinx_identification']} | "
              f"{r.get('wer', '-')} | {r['mcd_s_per_clip']} | {r['dtw_s_per_clip']} | {r['sphinx_s_per_clip']} | "
              f"{r.get('wer_s_per_clip', '-')} |")


if __name__ == "__main__":
    main()

"""Preprocessing and codec benchmark on real espeak-ng speech.

Throughput: renders espeak clips, cuts `--clips` (default 1,000) three-second 16 kHz clips from
them, trains a codec and a small SentencePiece tokenizer, then times in the same run
  1. a naive loop: one file at a time in one process, building the resampler and mel transform
     per file and writing each item with torch.save (the usual fine-tuning script), with torch's
     default threads and again pinned to one thread (which a loaded machine favours), and
  2. `build_cache` with all CPU cores (and with one worker, for reference: the scaling with cores).
Wall-clock clips/s depends on the machine's load; CPU ms per clip (user + system of the process and its
workers) much less so. The target: the cache build ≥ 3× the naive loop's clips/s in the same run.
Quality (`--quality`): codecs with several codebook sizes and hops, trained on the espeak sample
set's train split and evaluated on its val split (`codec eval` figures).

    .venv/bin/python bench/preprocess.py --clips 1000 --quality --json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import numpy as np  # noqa: E402
import soundfile as sf  # noqa: E402
import torch  # noqa: E402
import torchaudio  # noqa: E402

from core.data.cache import build_cache  # noqa: E402
from core.data.codec_training import evaluate_codec, train_codec  # noqa: E402
from core.speech.codec import load_codec  # noqa: E402
from core.data.sample import sample_dataset  # noqa: E402
from core.data.manifest import read_manifest, write_manifest  # noqa: E402
from core.data.sample_text import AMHARIC_SENTENCES, ENGLISH_SENTENCES  # noqa: E402

RATE = 16000
CLIP_SECONDS = 3.0


def make_clips(work: Path, count: int, sources_per_language: int) -> Path:
    """Return a manifest of `count` three-second clips cut from rendered espeak speech."""
    source = read_manifest(sample_dataset(work / "espeak", RATE, ["en", "am"], sources_per_language).manifest)[0]
    audio = {row.id: sf.read(str(row.path), dtype="float32")[0] for row in source}
    length = int(CLIP_SECONDS * RATE)
    rows = []
    (work / "clips" / "audio").mkdir(parents=True)
    for i in range(count):
        row = source[i % len(source)]
        wav = np.tile(audio[row.id], length // len(audio[row.id]) + 1)[:length] * (0.6 + 0.4 * ((i * 7) % 10) / 10)
        sf.write(str(work / "clips" / "audio" / f"c{i:05d}.wav"), wav, RATE, subtype="PCM_16")
        rows.append(
            type(row)(id=f"c{i:05d}", audio=f"audio/c{i:05d}.wav", text=row.text, speaker=row.speaker,
                      language=row.language, duration=CLIP_SECONDS)
        )
    return write_manifest(work / "clips" / "manifest.jsonl", rows)


def make_tokenizer(work: Path) -> Path:
    """Return a 1,000-piece SentencePiece model trained on the built-in sentences."""
    import sentencepiece as spm

    corpus = work / "corpus.txt"
    corpus.write_text("\n".join(ENGLISH_SENTENCES + AMHARIC_SENTENCES) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(work / "tok"), vocab_size=1000, model_type="bpe",
        character_coverage=1.0, minloglevel=2,
    )
    return work / "tok.model"


def cpu_seconds() -> float:
    """Return CPU seconds used so far by this process and its finished children."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def naive_loop(manifest: Path, tokenizer_path: Path, codec_path: Path, out: Path, threads: int | None = None) -> tuple[float, float]:
    """Return (clips/s, CPU ms per clip) of a one-file-at-a-time loop with per-file setup.

    `threads` None keeps torch's default intra-op threads (what such a script runs with); 1 pins one.
    """
    import sentencepiece as spm

    rows = read_manifest(manifest)[0]
    out.mkdir(parents=True)
    default_threads = torch.get_num_threads()
    torch.set_num_threads(threads or default_threads)
    start, cpu = time.perf_counter(), cpu_seconds()
    tokenizer = spm.SentencePieceProcessor(model_file=str(tokenizer_path))
    codebook = torch.load(codec_path, weights_only=True)["codebook"]
    for row in rows:
        data, rate = sf.read(str(row.path), dtype="float32")
        wav = torchaudio.transforms.Resample(rate, RATE)(torch.from_numpy(data).unsqueeze(0))
        mel = torchaudio.transforms.MelSpectrogram(RATE, n_fft=1024, hop_length=256, n_mels=80, power=1.0)(wav)
        frames = torch.log(mel.clamp_min(1e-5))[0].T
        codes = torch.cdist(frames, codebook).argmin(dim=1)
        ids = tokenizer.encode(row.text)
        torch.save({"text_ids": torch.tensor(ids), "codes": codes, "ref_mel": frames.half()}, out / f"{row.id}.pt")
    seconds = time.perf_counter() - start
    torch.set_num_threads(default_threads)
    return len(rows) / seconds, 1000 * (cpu_seconds() - cpu) / len(rows)


def timed_build(manifest: Path, tokenizer: Path, codec_path: Path, out: Path, workers: int) -> tuple[float, float]:
    """Return (clips/s, CPU ms per clip) of build_cache with `workers` processes."""
    cpu = cpu_seconds()
    info = build_cache(manifest, tokenizer, codec_path, out, workers=workers)
    return info.items / info.seconds, 1000 * (cpu_seconds() - cpu) / info.items


def throughput(work: Path, clips: int, codec_iterations: int) -> dict:
    """Return the throughput figures of the naive loops and build_cache on `clips` clips."""
    manifest = make_clips(work, clips, sources_per_language=40)
    tokenizer = make_tokenizer(work)
    start = time.perf_counter()
    codec = train_codec(manifest, codebook_size=1024, iterations=codec_iterations)
    codec_seconds = time.perf_counter() - start
    codec_path = codec.save(work / "codec.pt")
    naive, naive_cpu = naive_loop(manifest, tokenizer, codec_path, work / "naive")
    naive_one, naive_one_cpu = naive_loop(manifest, tokenizer, codec_path, work / "naive_one_thread", threads=1)
    workers = os.cpu_count() or 1
    rate, cpu = timed_build(manifest, tokenizer, codec_path, work / "cache_all", workers)
    single, single_cpu = timed_build(manifest, tokenizer, codec_path, work / "cache_one", 1)
    return {
        "clips": clips,
        "clip_seconds": CLIP_SECONDS,
        "codec_train_seconds_k1024": round(codec_seconds, 1),
        "codec_train_frames": codec.meta["train_frames"],
        "naive_clips_per_s": round(naive, 1),
        "naive_cpu_ms_per_clip": round(naive_cpu, 2),
        "naive_one_thread_clips_per_s": round(naive_one, 1),
        "naive_one_thread_cpu_ms_per_clip": round(naive_one_cpu, 2),
        "linguaforge_clips_per_s": round(rate, 1),
        "linguaforge_cpu_ms_per_clip": round(cpu, 2),
        "linguaforge_workers": workers,
        "linguaforge_one_worker_clips_per_s": round(single, 1),
        "linguaforge_one_worker_cpu_ms_per_clip": round(single_cpu, 2),
        "speedup_vs_naive": round(rate / naive, 2),
        "one_worker_speedup_vs_naive": round(single / naive, 2),
        "cpu_per_clip_naive_over_linguaforge": round(naive_cpu / cpu, 2),
        "speedup_vs_naive_one_thread": round(rate / naive_one, 2),
        "cpu_per_clip_naive_one_thread_over_linguaforge": round(naive_one_cpu / cpu, 2),
        "target_speedup_vs_naive": 3.0,
    }


def quality(work: Path, per_language: int, eval_clips: int) -> list[dict]:
    """Return codec eval figures for several codebook sizes and hops on the espeak sample set."""
    manifest = sample_dataset(work / "quality", RATE, ["en", "am"], per_language).manifest
    results = []
    for codebook_size, hop in ((256, 256), (512, 256), (1024, 256), (1024, 160)):
        start = time.perf_counter()
        codec = train_codec(manifest, codebook_size=codebook_size, hop_length=hop, val_ratio=0.1)
        seconds = time.perf_counter() - start
        path = codec.save(work / f"codec_{codebook_size}_{hop}.pt")
        report = evaluate_codec(load_codec(path), manifest, val_ratio=0.1, max_clips=eval_clips)
        results.append({"codebook_size": codebook_size, "hop_length": hop, "train_seconds": round(seconds, 1), **{
            k: report[k] for k in ("clips", "frame_rate", "quant_l1", "quant_mcd", "roundtrip_l1", "roundtrip_mcd",
                                   "vocoder_l1", "vocoder_mcd", "codes_used", "perplexity")
        }})
    return results


def commit() -> str:
    """Return the short commit hash of the checkout ('unknown' outside git), with `+dirty` for uncommitted changes."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clips", type=int, default=1000, help="three-second clips to preprocess (default 1000)")
    parser.add_argument("--codec-iterations", type=int, default=100,
                        help="k-means iterations of the throughput codec (default 100; the codes' cost does not depend on it)")
    parser.add_argument("--quality", action="store_true", help="also measure codec quality for several K and hops")
    parser.add_argument("--quality-per-language", type=int, default=120, help="espeak clips per language for quality")
    parser.add_argument("--eval-clips", type=int, default=12, help="val clips per codec evaluation")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lf-bench-") as tmp:
        work = Path(tmp)
        result = {
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "torch": torch.__version__,
                        "commit": commit(), "load_avg_start": os.getloadavg()[0]},
            "throughput": throughput(work, args.clips, args.codec_iterations),
        }
        if args.quality:
            result["codec_quality"] = quality(work, args.quality_per_language, args.eval_clips)
        result["machine"]["load_avg_end"] = os.getloadavg()[0]
    print(json.dumps(result, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

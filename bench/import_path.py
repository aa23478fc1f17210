"""The whole data path on Common Voice-shaped input: import → mp3 decode → filters → own-codec cache.

Renders espeak clips, cuts `--clips` three-second windows from their concatenation (different windows,
so the duplicate filter has real work and removes nothing), writes them as 32 kHz mp3 into a Common
Voice release (`clips/`, `validated.tsv`, several client_ids), trains a codec and a tokenizer, then
measures, `--repeats` times (default 2) in the same run and with the same thread budget
(`--threads`, default the CPU count: the naive loop's torch intra-op threads, LinguaForge's worker
processes of one thread each):
  1. naive: the loop of `bench/preprocess.py` reading the mp3 files (one file at a time, per-file
     setup, no filtering);
  2. import: `import_dataset("commonvoice", …, filters=…)` with 1 and with `--threads` workers;
  3. cache: `build_cache` of the imported manifest (`preprocess`);
  4. whole path: the import with filters building the cache in the same pass (`dataset import
     --codec`: each clip decoded once, the cache's items made from the samples the import decoded).
Each figure is reported per repetition with its spread (max/min − 1); a spread above 15% marks it
unstable. The load average is read before and after each repetition. Then a CPU profile of the
import's per-clip stages (thread CPU time, one thread, so other load does not inflate it).
The speech-rate filter is off: each window carries its source clip's sentence, not the words it holds.

    .venv/bin/python bench/import_path.py --clips 600 --json
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import numpy as np  # noqa: E402
import soundfile as sf  # noqa: E402
import torch  # noqa: E402

from bench.common import bench_parser  # noqa: E402
from bench.preprocess import commit, cpu_seconds, make_tokenizer, naive_loop  # noqa: E402
from core.data.cache import SamePassCache, build_cache  # noqa: E402
from core.data.codec_training import train_codec  # noqa: E402
from core.data.filter_config import FilterConfig  # noqa: E402
from core.data.importing import import_dataset  # noqa: E402
from core.data.manifest import ManifestRow, read_manifest, write_manifest  # noqa: E402
from core.data.sample import sample_dataset  # noqa: E402
from core.data.workers import pool_context  # noqa: E402

RATE = 16000
MP3_RATE = 32000
CLIP_SECONDS = 3.0
STEP_SECONDS = 0.713  # window start step: no two windows line up with each other
FILTERS = FilterConfig(off=["speech_rate"])
PROFILE_CLIPS = 100
UNSTABLE = 0.15  # repetitions further apart than this (max/min − 1) mark a figure unstable
TARGETS = {"whole_path_clips_per_s": 300.0, "whole_path_vs_naive": 1.2, "import_scaling": 1.8, "cache_vs_naive": 3.0}
HEADER = "client_id\tpath\tsentence_id\tsentence\tsentence_domain\tup_votes\tdown_votes\tage\tgender\taccents\tvariant\tlocale\tsegment"


def make_release(work: Path, count: int, sources_per_language: int) -> tuple[Path, Path]:
    """Return (release folder, manifest of the same mp3 clips for the naive loop)."""
    source = read_manifest(sample_dataset(work / "espeak", RATE, ["en", "am"], sources_per_language).manifest)[0]
    stream, starts = [], []
    for row in source:
        starts.append(sum(len(part) for part in stream))
        stream.append(sf.read(str(row.path), dtype="float32")[0])
    audio = np.concatenate(stream)
    up = np.interp(np.arange(0, len(audio), RATE / MP3_RATE), np.arange(len(audio)), audio).astype(np.float32)
    length = int(CLIP_SECONDS * MP3_RATE)
    release = work / "release"
    (release / "clips").mkdir(parents=True)
    lines, rows = [HEADER], []
    for i in range(count):
        begin = int(i * STEP_SECONDS * MP3_RATE) % (len(up) - length)
        row = source[int(np.searchsorted(starts, begin * RATE // MP3_RATE, side="right")) - 1]
        name = f"common_voice_{row.language}_{i:06d}.mp3"
        sf.write(str(release / "clips" / name), up[begin:begin + length], MP3_RATE, format="MP3", subtype="MPEG_LAYER_III")
        client = hashlib.sha512(row.speaker.encode()).hexdigest()
        lines.append("\t".join((client, name, str(i), row.text, "", "2", "0", "", "", "", "", row.language, "")))
        rows.append(ManifestRow(id=Path(name).stem, audio=str(release / "clips" / name), text=row.text,
                                speaker=row.speaker, language=row.language, duration=CLIP_SECONDS))
    (release / "validated.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return release, write_manifest(work / "naive.jsonl", rows)


def timed(run: Callable[[], Any]) -> tuple[Any, float, float]:
    """Return (what `run` returned, its wall seconds, the CPU seconds of this process and its finished children)."""
    cpu, start = cpu_seconds(), time.perf_counter()
    value = run()
    return value, time.perf_counter() - start, cpu_seconds() - cpu


def repetition(release: Path, tokenizer: Path, codec: Path, naive_manifest: Path, out: Path, threads: int) -> dict[str, Any]:
    """Return one repetition's figures: clips/s (and CPU ms per clip) of each stage, and the ratios."""
    clips = sum(1 for _ in open(release / "validated.tsv", encoding="utf-8")) - 1
    figures: dict[str, Any] = {"load_before": round(os.getloadavg()[0], 2)}
    naive, naive_cpu = naive_loop(naive_manifest, tokenizer, codec, out / "naive", threads)
    figures.update(naive_clips_per_s=round(naive, 1), naive_cpu_ms_per_clip=round(naive_cpu, 2))
    for workers in sorted({1, threads}):
        summary, wall, cpu = timed(lambda: import_dataset("commonvoice", release, out / f"import{workers}", RATE,
                                                          workers=workers, filters=FILTERS))
        figures[f"import_{workers}w_clips_per_s"] = round(clips / wall, 1)
        figures[f"import_{workers}w_cpu_ms_per_clip"] = round(1000 * cpu / clips, 2)
    info, wall, cpu = timed(lambda: build_cache(summary.manifest, tokenizer, codec, out / "cache", workers=threads))
    figures.update(cache_clips_per_s=round(info.items / wall, 1), cache_cpu_ms_per_clip=round(1000 * cpu / info.items, 2))

    def whole() -> Any:
        with SamePassCache(tokenizer, codec, out / "whole" / "cache") as cache:
            return import_dataset("commonvoice", release, out / "whole" / "dataset", RATE, workers=threads,
                                  filters=FILTERS, cache=cache)

    fused, wall, cpu = timed(whole)
    assert fused.cache is not None and fused.cache.items == fused.kept and fused.cache.built == 0, "the same-pass cache"
    figures.update(whole_path_clips_per_s=round(clips / wall, 1), whole_path_cpu_ms_per_clip=round(1000 * cpu / clips, 2),
                   kept=fused.kept, removed=fused.filters["removed"])
    figures.update(import_scaling=round(figures[f"import_{threads}w_clips_per_s"] / figures["import_1w_clips_per_s"], 2),
                   cache_vs_naive=round(figures["cache_clips_per_s"] / naive, 2),
                   whole_path_vs_naive=round(figures["whole_path_clips_per_s"] / naive, 2),
                   load_after=round(os.getloadavg()[0], 2))
    shutil.rmtree(out)
    return figures


def spreads(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Return, per numeric figure, its values over the repetitions, their spread and whether it is stable."""
    table = {}
    for key, value in runs[0].items():
        if not isinstance(value, (int, float)) or key.startswith("load_") or key == "kept":
            continue
        values = [run[key] for run in runs]
        spread = max(values) / min(values) - 1 if min(values) > 0 else float("inf")
        table[key] = {"runs": values, "spread_pct": round(100 * spread, 1), "stable": spread <= UNSTABLE}
    return table


def stage_profile(release: Path, work: Path) -> dict[str, float]:
    """Return the CPU ms per clip of each import stage over the first `PROFILE_CLIPS` clips, in this thread."""
    from core.audio import pcm16, pcm16_wav, read_audio, resample
    from core.data import measures, vad

    clips = sorted((release / "clips").glob("*.mp3"))[:PROFILE_CLIPS]
    spent: dict[str, float] = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the import runs its clips

    def timed_stage(name: str, run, *args):  # noqa: ANN001, ANN202
        start = time.thread_time()
        value = run(*args)
        spent[name] = spent.get(name, 0.0) + time.thread_time() - start
        return value

    for clip in clips:
        raw, rate = timed_stage("decode_mp3", read_audio, clip)
        wav = timed_stage("resample_32k_to_16k", resample, raw, rate, RATE)
        samples = wav.numpy()
        timed_stage("clipping", measures.clipping_share, samples)
        timed_stage("snr", measures.snr_db, samples, RATE)
        timed_stage("vad", vad.speech_bounds, wav, RATE)
        bits = timed_stage("fingerprint", measures.fingerprint, samples, RATE)
        timed_stage("fingerprint_keys", measures.fingerprint_keys, bits)
        timed_stage("digest", measures.pcm_digest, samples)
        data = timed_stage("encode_wav", lambda w: pcm16_wav(pcm16(w), RATE), wav)
        timed_stage("write_wav_unsynced", (work / "profile.wav").write_bytes, data)
    torch.set_num_threads(threads)
    return {name: round(1000 * seconds / len(clips), 2) for name, seconds in spent.items()}


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--clips", type=int, default=600, help="three-second mp3 clips (default 600)")
    parser.add_argument("--repeats", type=int, default=2, help="repetitions of every measured stage (default 2)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="the thread budget: the naive loop's intra-op threads and LinguaForge's worker processes "
                             "(default: the CPU count)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lf-bench-import-") as tmp:
        work = Path(tmp)
        load_start = round(os.getloadavg()[0], 2)
        release, naive_manifest = make_release(work, args.clips, sources_per_language=40)
        tokenizer = make_tokenizer(work)
        codec_path = train_codec(naive_manifest, codebook_size=1024).save(work / "codec.pt")
        runs = [repetition(release, tokenizer, codec_path, naive_manifest, work / f"run{i}", args.threads)
                for i in range(args.repeats)]
        table = spreads(runs)
        result = {
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "torch": torch.__version__,
                        "commit": commit(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
                        "pool_start_method": pool_context().get_start_method(),
                        "load_avg_start": load_start, "load_avg_end": round(os.getloadavg()[0], 2)},
            "clips": args.clips, "clip_seconds": CLIP_SECONDS, "source": "commonvoice mp3 32 kHz", "threads": args.threads,
            "repetitions": runs,
            "figures": table,
            "unstable": sorted(key for key, row in table.items() if not row["stable"]),
            "targets": {key: {"target": target, "met_in_every_repetition": all(run[key] >= target for run in runs)}
                        for key, target in TARGETS.items()},
            "import_cpu_ms_per_clip_by_stage": stage_profile(release, work),
        }
    print(json.dumps(result, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

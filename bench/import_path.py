"""The whole data path on Common Voice-shaped input: import → mp3 decode → filters → own-codec cache.

Renders espeak clips, cuts `--clips` three-second windows from their concatenation (different windows,
so the duplicate filter has real work and removes nothing), writes them as 32 kHz mp3 into a Common
Voice release (`clips/`, `validated.tsv`, several client_ids), trains a codec and a tokenizer, then times
in the same run
  1. the naive loop of `bench/preprocess.py` reading the mp3 files (one file at a time, per-file setup,
     no filtering), and
  2. LinguaForge: `import_dataset("commonvoice", …, filters=…)` with 1 and all-core threads, then
     `build_cache` with as many processes; each stage's clips/s and the whole path's, and
  3. a CPU profile of the import's per-clip stages (thread CPU time, one thread, so other load on the
     machine does not inflate it).
The speech-rate filter is off: each window carries its source clip's sentence, not the words it holds,
so its characters per second mean nothing here (the filter's cost is one division per clip).

    .venv/bin/python bench/import_path.py --clips 600 --json
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import numpy as np  # noqa: E402
import soundfile as sf  # noqa: E402
import torch  # noqa: E402

from bench.common import bench_parser  # noqa: E402
from bench.preprocess import cpu_seconds, make_tokenizer, naive_loop  # noqa: E402
from core.data.cache import build_cache  # noqa: E402
from core.data.codec_training import train_codec  # noqa: E402
from core.data.filter_config import FilterConfig  # noqa: E402
from core.data.importing import import_dataset  # noqa: E402
from core.data.manifest import ManifestRow, read_manifest, write_manifest  # noqa: E402
from core.data.sample import sample_dataset  # noqa: E402

RATE = 16000
MP3_RATE = 32000
CLIP_SECONDS = 3.0
STEP_SECONDS = 0.713  # window start step: no two windows line up with each other
FILTERS = FilterConfig(off=["speech_rate"])
PROFILE_CLIPS = 100
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


def whole_path(release: Path, tokenizer: Path, codec_path: Path, out: Path, workers: int) -> dict:
    """Return the import (decode + filters) and cache figures of LinguaForge's path with `workers`."""
    cpu, start = cpu_seconds(), time.perf_counter()
    summary = import_dataset("commonvoice", release, out / "dataset", RATE, workers=workers, filters=FILTERS)
    import_s = time.perf_counter() - start
    info = build_cache(summary.manifest, tokenizer, codec_path, out / "cache", workers=workers)
    total_s = time.perf_counter() - start
    clips = summary.kept + summary.rejected
    return {
        "workers": workers,
        "kept": summary.kept,
        "removed": summary.filters["removed"],
        "import_filter_clips_per_s": round(clips / import_s, 1),
        "cache_clips_per_s": round(info.items / info.seconds, 1),
        "whole_path_clips_per_s": round(clips / total_s, 1),
        "cpu_ms_per_clip": round(1000 * (cpu_seconds() - cpu) / clips, 2),
    }


def stage_profile(release: Path, work: Path) -> dict[str, float]:
    """Return the CPU ms per clip of each import stage over the first `PROFILE_CLIPS` clips, in this thread."""
    from core.audio import read_audio, resample, write_wav
    from core.data import measures, vad

    clips = sorted((release / "clips").glob("*.mp3"))[:PROFILE_CLIPS]
    spent: dict[str, float] = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the import runs its clips

    def timed(name: str, run, *args):  # noqa: ANN001, ANN202
        start = time.thread_time()
        value = run(*args)
        spent[name] = spent.get(name, 0.0) + time.thread_time() - start
        return value

    for clip in clips:
        raw, rate = timed("decode_mp3", read_audio, clip)
        wav = timed("resample_32k_to_16k", resample, raw, rate, RATE)
        samples = wav.numpy()
        timed("clipping", measures.clipping_share, samples)
        timed("snr", measures.snr_db, samples, RATE)
        timed("vad", vad.speech_bounds, wav, RATE)
        bits = timed("fingerprint", measures.fingerprint, samples, RATE)
        timed("fingerprint_keys", measures.fingerprint_keys, bits)
        timed("digest", measures.pcm_digest, samples)
        timed("write_wav", write_wav, work / "profile.wav", wav, RATE)
    torch.set_num_threads(threads)
    return {name: round(1000 * seconds / len(clips), 2) for name, seconds in spent.items()}


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--clips", type=int, default=600, help="three-second mp3 clips (default 600)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lf-bench-import-") as tmp:
        work = Path(tmp)
        load_start = os.getloadavg()[0]
        release, naive_manifest = make_release(work, args.clips, sources_per_language=40)
        tokenizer = make_tokenizer(work)
        codec_path = train_codec(naive_manifest, codebook_size=1024).save(work / "codec.pt")
        naive, naive_cpu = naive_loop(naive_manifest, tokenizer, codec_path, work / "naive")
        cores = os.cpu_count() or 1
        paths = [whole_path(release, tokenizer, codec_path, work / f"lf{n}", n) for n in sorted({1, cores})]
        result = {
            "machine": {"cpus": cores, "platform": platform.platform(), "torch": torch.__version__,
                        "load_avg_start": load_start, "load_avg_end": os.getloadavg()[0]},
            "clips": args.clips, "clip_seconds": CLIP_SECONDS, "source": "commonvoice mp3 32 kHz",
            "naive_clips_per_s": round(naive, 1), "naive_cpu_ms_per_clip": round(naive_cpu, 2),
            "linguaforge": paths,
            "whole_path_vs_naive": round(paths[-1]["whole_path_clips_per_s"] / naive, 2),
            "import_cpu_ms_per_clip_by_stage": stage_profile(release, work),
        }
    print(json.dumps(result, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

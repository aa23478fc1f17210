"""Voice-activity detectors for silence trimming: webrtcvad vs silero-vad on espeak speech.

Renders espeak clips (the sample sentences), pads each with known leading/trailing silence
(0.5 s before, 2 s after) and optionally white noise at a given SNR, and reports for each VAD the
error of the detected speech start/end against the clean clip's own bounds (found by a -50 dBFS
sample threshold on the unpadded clip) and the time per clip.

    .venv/bin/python bench/vad.py --clips 24 --json
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

import numpy as np  # noqa: E402
import torch  # noqa: E402

from core.data.manifest import read_manifest  # noqa: E402
from core.data.sample import sample_dataset  # noqa: E402
from core.audio import read_audio  # noqa: E402
from core.data.vad import speech_bounds  # noqa: E402

RATE = 16000
LEAD, TRAIL = 0.5, 2.0


def silero_bounds(model, wav: np.ndarray) -> tuple[float, float] | None:
    from silero_vad import get_speech_timestamps

    stamps = get_speech_timestamps(torch.from_numpy(wav), model, sampling_rate=RATE, return_seconds=True)
    return (stamps[0]["start"], stamps[-1]["end"]) if stamps else None


def true_bounds(wav: np.ndarray) -> tuple[float, float]:
    loud = np.flatnonzero(np.abs(wav) > 10 ** (-50 / 20))
    return loud[0] / RATE, (loud[-1] + 1) / RATE


def add_noise(wav: np.ndarray, snr_db: float, rng: np.random.Generator) -> np.ndarray:
    """Return `wav` plus white noise at `snr_db` relative to the speech power of the clean clip."""
    power = float(np.mean(wav[np.abs(wav) > 1e-3] ** 2))
    return wav + rng.normal(0, np.sqrt(power / 10 ** (snr_db / 10)), wav.shape).astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clips", type=int, default=24, help="espeak clips per language (en, am)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    from silero_vad import load_silero_vad

    silero = load_silero_vad(onnx=True)
    rng = np.random.default_rng(0)
    results: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        summary = sample_dataset(Path(tmp) / "s", RATE, ["en", "am"], args.clips)
        rows, _ = read_manifest(summary.manifest)
        for condition in ("clean", "snr20", "snr10"):
            for row in rows:
                clean = read_audio(row.path)[0].numpy()
                start, end = true_bounds(clean)
                padded = np.concatenate([np.zeros(int(LEAD * RATE), np.float32), clean, np.zeros(int(TRAIL * RATE), np.float32)])
                if condition != "clean":
                    padded = add_noise(padded, float(condition[3:]), rng).astype(np.float32)
                for name, detect in (("webrtcvad", lambda w: speech_bounds(torch.from_numpy(w), RATE)),
                                     ("silero", lambda w: silero_bounds(silero, w))):
                    began = time.perf_counter()
                    found = detect(padded)
                    spent = time.perf_counter() - began
                    entry = results.setdefault(f"{name}/{condition}", {"start_err": [], "end_err": [], "ms": [], "missed": []})
                    entry["ms"].append(spent * 1000)
                    entry["missed"].append(float(found is None))
                    if found is not None:
                        entry["start_err"].append(abs(found[0] - (start + LEAD)))
                        entry["end_err"].append(abs(found[1] - (end + LEAD)))
    table = {key: {"clips": len(v["ms"]), "missed": int(sum(v["missed"])),
                   "start_err_median_s": round(float(np.median(v["start_err"])), 3) if v["start_err"] else None,
                   "end_err_median_s": round(float(np.median(v["end_err"])), 3) if v["end_err"] else None,
                   "end_err_max_s": round(float(np.max(v["end_err"])), 3) if v["end_err"] else None,
                   "ms_per_clip": round(float(np.median(v["ms"])), 2)} for key, v in results.items()}
    if args.json:
        print(json.dumps(table, indent=2))
    else:
        for key, row in table.items():
            print(key, row)


if __name__ == "__main__":
    main()

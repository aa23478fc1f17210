"""Generation benchmark: speech-code generation with the static KV cache (CUDA's default decoder), the growing
cache (the CPU's) and no cache, as a real-time factor and milliseconds per code.

A TTS model of each size generates a fixed number of codes (its stop logit suppressed so every
run has the same length) for one sentence; RTF = wall seconds / seconds of audio the codes stand
for at the codec frame rate (16 kHz, hop 256: 62.5 codes per second). At `tiny` a code's compute is
small, so its ms per code is the decoder's per-token overhead. On CUDA (`--device cuda`) a row more
runs the static step as one CUDA graph (`compiled_step`: `torch.compile(mode="reduce-overhead")`; its
first, compiling generation is not timed). The Griffin-Lim decode of the codec is timed separately.

    .venv/bin/python bench/generate.py --codes 250 --json
    .venv/bin/python bench/generate.py --device cuda --sizes base --json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from core.speech.codec import CodecConfig, SpeechCodec  # noqa: E402
from models.registry import MODEL_SIZES, model_config  # noqa: E402
from models.tts import GPTTTS  # noqa: E402


DECODERS = {"static_cache": {"static_cache": True}, "growing_cache": {"static_cache": False}, "no_cache": {"use_cache": False},
            "cuda_graph": {"static_cache": True, "compiled_step": True}}


def time_generation(model: GPTTTS, codes: int, options: dict, repeats: int) -> float:
    """Return the best wall time of `repeats` generations of `codes` codes (greedy, 20 text tokens) with the
    decoder `options` (after one untimed generation when the step is compiled)."""
    text = list(range(2, 22))
    reference = torch.randn(120, model.config.n_mels)
    best = float("inf")
    for attempt in range(repeats + bool(options.get("compiled_step"))):
        sync(model)
        start = time.perf_counter()
        out = model.generate(text, reference, temperature=0, max_codes=codes, **options)
        sync(model)
        if attempt or not options.get("compiled_step"):
            best = min(best, time.perf_counter() - start)
        assert len(out) == codes
    return best


def sync(model: GPTTTS) -> None:
    """Wait for the model's device (CUDA) to finish its queued work."""
    if model.text_pos.weight.is_cuda:
        torch.cuda.synchronize()


def main() -> None:
    """Parse options, time generation per model size with and without the cache, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--codes", type=int, default=250, help="codes per generation (62.5 per second of audio)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--sizes", nargs="+", default=["tiny", "base"], choices=sorted(MODEL_SIZES))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    codec = SpeechCodec(CodecConfig(codebook_size=1024), torch.randn(1024, 80) - 4.0)
    audio_seconds = args.codes / codec.frame_rate
    rows = []
    decoders = [name for name in DECODERS if name != "cuda_graph" or args.device.startswith("cuda")]
    for size in args.sizes:
        torch.manual_seed(0)
        shape = {**MODEL_SIZES[size], "max_speech_tokens": max(args.codes, MODEL_SIZES[size]["max_speech_tokens"])}
        model = GPTTTS(model_config("tts", shape, text_rows=12000, codebook_size=1024, n_mels=80)).eval().to(args.device)
        with torch.no_grad():
            model.mel_head.bias[model.config.stop_speech] = -1e4
        row: dict = {"model": size, "device": args.device, "codes": args.codes, "audio_seconds": round(audio_seconds, 2)}
        for name in decoders:
            seconds = time_generation(model, args.codes, DECODERS[name], args.repeats)
            row[f"rtf_{name}"] = round(seconds / audio_seconds, 4)
            row[f"ms_per_code_{name}"] = round(1000 * seconds / args.codes, 3)
        rows.append(row)
    start = time.perf_counter()
    codec.decode(torch.randint(0, 1024, (args.codes,)))
    decode_rtf = (time.perf_counter() - start) / audio_seconds
    report = {"machine": {"python": platform.python_version(), "torch": torch.__version__, "threads": args.threads,
                          "cpus": os.cpu_count(), "load": os.getloadavg()[0]},
              "generation": rows, "griffin_lim_decode_rtf": round(decode_rtf, 4)}
    print(json.dumps(report, indent=None if args.json else 2))


if __name__ == "__main__":
    main()

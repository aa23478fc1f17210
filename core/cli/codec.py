"""`codec train`, `codec eval`, `codec encode`, `codec decode`: the embedded discrete speech codec."""

from __future__ import annotations

import argparse

from core.paths import CLI_PATH
from core.cli.common import SEED_ARG, Result, add_command, add_group, device_arg, float_in, int_in, options_of
from core.config import load_settings
from core.errors import InputError
from core.tables import render_mapping


def _train(args: argparse.Namespace) -> Result:
    """Fit a codebook by mini-batch k-means over log-mel frames of the manifest's train split (GPU when present)."""
    from core.data.codec_training import evaluate_codec, train_codec

    codec = train_codec(
        args.manifest,
        sample_rate=int(load_settings().get("audio.sample_rate", 16000)),
        **options_of(args, "codebook_size", "hop_length", "n_mels", "val_ratio", "iterations", "max_frames", "seed", "device"),
    )
    output = codec.save(args.output)
    data = {"output": str(output), "fingerprint": codec.fingerprint, "frame_rate": codec.frame_rate, **codec.meta}
    if args.eval_clips:
        data["eval"] = evaluate_codec(codec, args.manifest, args.val_ratio, args.eval_clips)
    text = render_mapping({k: v for k, v in data.items() if k != "eval"})
    if "eval" in data:
        text += "\neval:\n" + render_mapping(data["eval"])
    return Result(data, text)


def _eval(args: argparse.Namespace) -> Result:
    """Round-trip log-mel L1 and mel-cepstral distortion on the val split."""
    from core.speech.codec import load_codec
    from core.data.codec_training import evaluate_codec

    report = evaluate_codec(
        load_codec(args.codec), args.manifest, args.val_ratio, args.max_clips, not args.no_vocoder
    )
    return Result(report, render_mapping(report))


def _encode(args: argparse.Namespace) -> Result:
    """Audio file → codes (.npy, int32)."""
    import numpy as np

    from core.audio import read_audio
    from core.speech.codec import load_codec
    from core.fsutil import atomic_write

    codec = load_codec(args.codec)
    codes = codec.encode(read_audio(args.input, codec.sample_rate)[0])
    output = args.output
    if output.suffix != ".npy":
        output = output.with_name(output.name + ".npy")
    with atomic_write(output) as tmp, open(tmp, "wb") as handle:
        np.save(handle, codes.numpy().astype(np.int32))
    data = {"output": str(output), "frames": int(codes.numel()), "seconds": round(codes.numel() / codec.frame_rate, 3)}
    return Result(data, render_mapping(data))


def _decode(args: argparse.Namespace) -> Result:
    """Codes (.npy) → wav by codebook lookup and Griffin-Lim."""
    import numpy as np
    import torch

    from core.audio import write_wav
    from core.speech.codec import load_codec

    codec = load_codec(args.codec)
    source = args.codes
    try:
        codes = np.load(source)
    except (OSError, ValueError) as exc:
        raise InputError(f"{source}: not a .npy array of codes ({exc}).") from exc
    wav = codec.decode(torch.from_numpy(codes.astype(np.int64)))
    output = write_wav(args.output, wav, codec.sample_rate)
    data = {"output": str(output), "seconds": round(wav.numel() / codec.sample_rate, 3)}
    return Result(data, render_mapping(data))


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `codec` group: train, eval, encode, decode."""
    group = add_group(subparsers, "codec", "the embedded speech codec (log-mel codebook + Griffin-Lim)")
    train = add_command(group, "train", _train)
    train.add_argument("--manifest", required=True, type=CLI_PATH, help="manifest.jsonl")
    train.add_argument("--codebook-size", type=int_in(2, 65536), default=1024, help="number of codes K (default 1024)")
    train.add_argument("--output", required=True, type=CLI_PATH, help="codec file to write (.pt)")
    train.add_argument("--hop-length", type=int_in(1, 65536), default=256, help="samples per frame (default 256: 62.5 frames/s at 16 kHz)")
    train.add_argument("--n-mels", type=int_in(1, 1024), default=80, help="mel bins (default 80)")
    train.add_argument("--val-ratio", type=float_in(0.0, 1.0, high_open=True), default=0.05, help="share of clips held out (default 0.05)")
    train.add_argument("--iterations", type=int_in(1, 1_000_000), default=100, help="k-means mini-batch steps of 4096 frames (default 100)")
    train.add_argument("--max-frames", type=int_in(1, 100_000_000), default=500_000, help="frames sampled for k-means (default 500000)")
    train.add_argument("--seed", type=SEED_ARG, default=0, help="random seed (default 0)")
    train.add_argument("--device", type=device_arg, help="cpu or cuda (default: cuda when present)")
    train.add_argument("--eval-clips", type=int_in(0, 100_000), default=0, help="also evaluate on this many val clips (default 0)")
    ev = add_command(group, "eval", _eval)
    ev.add_argument("--codec", required=True, type=CLI_PATH, help="codec .pt")
    ev.add_argument("--manifest", required=True, type=CLI_PATH, help="manifest.jsonl")
    ev.add_argument("--val-ratio", type=float_in(0.0, 1.0, high_open=True), default=0.05, help="val share, as in training (default 0.05)")
    ev.add_argument("--max-clips", type=int_in(1, 100_000), default=20, help="clips evaluated (default 20)")
    ev.add_argument("--no-vocoder", action="store_true", help="skip the Griffin-Lim round trip (codebook error only)")
    enc = add_command(group, "encode", _encode)
    enc.add_argument("--codec", required=True, type=CLI_PATH, help="codec .pt")
    enc.add_argument("--input", required=True, type=CLI_PATH, help="audio file")
    enc.add_argument("--output", required=True, type=CLI_PATH, help="codes file (.npy)")
    dec = add_command(group, "decode", _decode)
    dec.add_argument("--codec", required=True, type=CLI_PATH, help="codec .pt")
    dec.add_argument("--codes", required=True, type=CLI_PATH, help="codes file (.npy)")
    dec.add_argument("--output", required=True, type=CLI_PATH, help="wav file to write")

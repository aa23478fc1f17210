"""`preprocess`: the fingerprinted feature cache — the own codec's, or any family's run — whole or by shards."""

from __future__ import annotations

import argparse
import os
from functools import partial
from typing import Any, Callable

from core.paths import CLI_PATH
from core.cli.common import Result, add_command, float_in, int_in
from core.numbers import MAX_WORKERS
from core.config import load_settings
from core.errors import InputError
from core.tables import render_mapping

DEFAULT_VAL_RATIO = 0.05
OWN_CODEC_OPTIONS = ("manifest", "tokenizer", "codec", "output", "val_ratio", "uppercase")


def _argument(parse: Callable[[str], Any], name: str) -> Callable[[str], Any]:
    """Return an argparse type running `parse`, its InputError shown as argparse's one-line error."""

    def convert(value: str) -> Any:
        try:
            return parse(value)
        except InputError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = name
    return convert


def _builder(args: argparse.Namespace, devices: list[str]) -> Callable[..., Any]:
    """Return build(shard=…, device=…) for the options: a run config's family features, or the own codec's cache.

    Raises InputError when the options mix the two ways or leave the own codec's inputs out.
    """
    from core.data.cache import build_cache
    from core.training.features import build_run_features

    given = [f"--{name.replace('_', '-')}" for name in OWN_CODEC_OPTIONS if getattr(args, name) is not None]
    if args.config is not None:
        if given:
            raise InputError(f"--config takes the manifest, tokenizer, codec, val ratio and cache folder from the run config; "
                             f"drop {', '.join(given)}.")
        return partial(build_run_features, args.config)
    missing = [f"--{name}" for name in ("manifest", "tokenizer", "codec") if getattr(args, name) is None]
    if missing:
        raise InputError(f"preprocess needs {', '.join(missing)} (the own codec's cache), or --config RUN.yaml "
                         "(the run's feature cache, any family, as `train` builds it).")
    workers = args.workers or (max(1, (os.cpu_count() or 1) // len(devices)) if devices else None)
    return partial(build_cache, args.manifest, args.tokenizer, args.codec, args.output or load_settings().resolve("cache"),
                   workers=workers, val_ratio=DEFAULT_VAL_RATIO if args.val_ratio is None else args.val_ratio,
                   uppercase=args.uppercase)


def _report(infos: list[Any]) -> Result:
    """Return the command's result: one build's report, or the shards' reports under the cache's."""
    skipped = max(infos, key=lambda i: i.complete).skipped
    if len(infos) == 1:
        data = infos[0].to_dict()
        shown = {k: v for k, v in data.items() if k != "skipped"} | {"skipped": len(skipped)}
    else:
        first = infos[0]
        shards = [{k: v for k, v in i.to_dict().items() if k not in ("path", "fingerprint", "skipped")} for i in infos]
        data = {"path": str(first.path), "fingerprint": first.fingerprint, "complete": any(i.complete for i in infos),
                "items": max(i.items for i in infos), "built": sum(i.built for i in infos),
                "missing": min(i.missing for i in infos), "skipped": skipped, "shards": shards}
        shown = {k: v for k, v in data.items() if k not in ("skipped", "shards")} | {"skipped": len(skipped)}
        shown |= {f"shard {s['shard']}": f"built {s['built']}, reused {s['reused']} in {s['seconds']} s" for s in shards}
    lines = [render_mapping(shown)]
    if not data["complete"]:
        lines.append(f"  {data['missing']} clip(s) belong to shards not finished yet; the last shard to finish writes index.json.")
    lines.extend(f"  skipped {s.get('id')} (line {s.get('line')}): {s['error']}" for s in skipped[:20])
    return Result(data, "\n".join(lines))


def _preprocess(args: argparse.Namespace) -> Result:
    """Build the feature cache a run trains on: the own codec's (--manifest, --tokenizer, --codec) or a run config's (--config).

    The cache lives in OUTPUT/<fingerprint>/ (a fingerprint of the tokenizer, the codec or feature models,
    the text normaliser, the val ratio and the manifest), so a changed input never reuses an old cache.
    It resumes an interrupted build and rebuilds corrupt items. --config builds any family's features as
    `train` would (Chatterbox, IndexTTS2, the own codec). --devices runs one process per device
    (cuda:0,cuda:1 — or cpu,cpu); --shard I/N builds shard I of N (e.g. one job per machine, through the
    job queue): all write into the same folder, and whichever finishes last writes the merged index.json,
    equal to the one a single process writes. See docs/feature-cache.md.
    """
    from core.data.shards import check_devices, run_on_devices

    devices = args.devices or []
    build = _builder(args, devices)
    check_devices(devices)
    infos = run_on_devices(build, devices, args.shard) if devices else [build(shard=args.shard, device=None)]
    return _report(infos)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the top-level `preprocess` command."""
    from core.data.shards import MAX_DEVICES, MAX_SHARDS, parse_devices, parse_shard

    parser = add_command(subparsers, "preprocess", _preprocess)
    parser.add_argument("--config", type=CLI_PATH, help="run config (YAML): build the run's feature cache, any family")
    parser.add_argument("--manifest", type=CLI_PATH, help="manifest.jsonl (the own codec's cache)")
    parser.add_argument("--tokenizer", type=CLI_PATH, help="tokenizer .model or .json (the own codec's cache)")
    parser.add_argument("--codec", type=CLI_PATH, help="codec .pt made by `codec train` (the own codec's cache)")
    parser.add_argument("--output", type=CLI_PATH, help="cache root (default: the workspace's cache/)")
    parser.add_argument("--workers", type=int_in(1, MAX_WORKERS),
                        help="own codec: worker processes (default: CPU cores, shared out among --devices)")
    parser.add_argument("--val-ratio", type=float_in(0.0, 1.0, high_open=True),
                        help=f"share of clips in the val split (default {DEFAULT_VAL_RATIO})")
    parser.add_argument("--shard", type=_argument(parse_shard, "shard I/N"), metavar="I/N",
                        help=f"build shard I of N only (0 ≤ I < N ≤ {MAX_SHARDS:,}); the last shard to finish writes the index")
    parser.add_argument("--devices", type=_argument(parse_devices, "device list"), metavar="DEVICES",
                        help=f"one process per device, e.g. cuda:0,cuda:1 or cpu,cpu, at most {MAX_DEVICES} (with --shard: that shard "
                             "split over them)")
    case = parser.add_mutually_exclusive_group()
    case.add_argument("--uppercase", dest="uppercase", action="store_true", default=None, help="upper-case text before tokenising")
    case.add_argument("--no-uppercase", dest="uppercase", action="store_false", help="keep the text's case")

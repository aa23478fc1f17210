"""`cache list` and `cache clean`: preprocessing caches under the cache root."""

from __future__ import annotations

import argparse
from pathlib import Path

from core.cli.common import Result, add_command, add_group
from core.config import load_settings
from core.paths import CLI_PATH
from core.tables import render_table


def _root(args: argparse.Namespace) -> Path:
    from core.errors import InputError

    root = args.root or load_settings().resolve("cache")
    if args.root and not root.is_dir():
        what = "a file" if root.exists() else "missing"
        raise InputError(f"--root {args.root}: {what}, not a folder. Pass the cache root folder (default: the workspace's cache/).")
    return root


def _list(args: argparse.Namespace) -> Result:
    """List caches with their items, tokenizer and whether they are still usable."""
    from core.data.cache_admin import list_caches

    root = _root(args)
    records = list_caches(root)
    rows = [
        (r["fingerprint"][:16], r.get("items", "-"), r.get("tokenizer", "-"), f"{r['bytes'] / 1e6:.1f}", "unused: " + "; ".join(r["reasons"]) if r["unused"] else "in use")
        for r in records
    ]
    text = render_table(["cache", "items", "tokenizer", "MB", "state"], rows) if rows else f"no caches in {root}"
    return Result({"root": str(root), "caches": records}, text)


def _clean(args: argparse.Namespace) -> Result:
    """Delete caches (all, or with --unused only those whose manifest, tokenizer or codec changed or whose build never finished)."""
    from core.data.cache_admin import clean_caches

    root = _root(args)
    removed = clean_caches(root, unused_only=args.unused)
    freed = sum(r["bytes"] for r in removed)
    text = f"removed {len(removed)} cache(s) from {root}, {freed / 1e6:.1f} MB freed"
    return Result({"root": str(root), "removed": [r["fingerprint"] for r in removed], "bytes_freed": freed}, text)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `cache` group: list, clean."""
    group = add_group(subparsers, "cache", "list and clean preprocessing caches")
    listing = add_command(group, "list", _list)
    listing.add_argument("--root", type=CLI_PATH, help="cache root (default: the workspace's cache/)")
    clean = add_command(group, "clean", _clean)
    clean.add_argument("--root", type=CLI_PATH, help="cache root (default: the workspace's cache/)")
    clean.add_argument("--unused", action="store_true", help="only delete caches no preprocess run can reuse")

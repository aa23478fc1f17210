"""`checkpoint inspect`: family, rows, dims, metadata and a key summary of any checkpoint."""

from __future__ import annotations

import argparse

from core.paths import CLI_PATH
from core.cli.common import Result, add_command, add_group
from core.tables import render_mapping, render_table


def _inspect(args: argparse.Namespace) -> Result:
    """Print family, rows, dims, metadata and a key summary of a checkpoint."""
    from core.families.summary import inspect_checkpoint  # torch loads only when the command runs

    info = inspect_checkpoint(args.path)
    lines = [
        render_mapping(
            {
                "path": info["path"],
                "sha256": info["sha256"],
                "family": info["family"] or f"unknown ({info['family_error']})",
                "rows": info["rows"],
                "dim": info["dim"],
                "tensors": info["tensor_count"],
                "parameters": info["parameters"],
            }
        ),
        "",
        "metadata: none (foreign checkpoint)" if info["meta"] is None else "metadata:",
    ]
    if info["meta"] is not None:
        lines.append(render_mapping({k: v for k, v in info["meta"].items() if v is not None}))
    lines += ["", "text tensors:", render_table(["key", "shape", "dtype"], info["text_tensors"])] if info["text_tensors"] else []
    lines += ["", "key groups:", render_table(["prefix", "tensors", "parameters"], info["groups"])]
    if info["dropped"]:
        lines += ["", f"dropped alias keys: {', '.join(info['dropped'])}"]
    return Result(info, "\n".join(lines))


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `checkpoint` group with its `inspect` command."""
    group = add_group(subparsers, "checkpoint", "inspect model checkpoints (ours or foreign)")
    parser = add_command(group, "inspect", _inspect)
    parser.add_argument("path", type=CLI_PATH, help=".safetensors, .pt or .pth file (relative to the current directory)")

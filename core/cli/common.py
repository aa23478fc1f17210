"""Helpers every CLI group uses: the Result type, command registration and option parsing.

Tables and key/value lists render with `core.tables` (the doctor shares it)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass
class Result:
    """What a command produced: `data` for `--json`, `text` for people, and its exit code."""

    data: dict[str, Any] = field(default_factory=dict)
    text: str = ""
    exit_code: int = 0


Handler = Callable[[argparse.Namespace], Result]


def add_command(
    subparsers: argparse._SubParsersAction,
    name: str,
    handler: Handler,
    help: str,
    description: str | None = None,
) -> argparse.ArgumentParser:
    """Add a command that runs `handler`, with the shared `--json` flag; return its parser."""
    parser = subparsers.add_parser(
        name,
        help=help,
        description=description or help,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.set_defaults(handler=handler)
    return parser


def add_group(subparsers: argparse._SubParsersAction, name: str, help: str) -> argparse._SubParsersAction:
    """Add a command group such as `tokenizer` and return the subparsers for its commands."""
    parser = subparsers.add_parser(name, help=help, description=help)
    return parser.add_subparsers(dest="command", metavar="COMMAND", required=True)


def csv_list(value: str) -> list[str]:
    """Parse a comma-separated option value into a list of non-empty, stripped items."""
    return [item.strip() for item in value.split(",") if item.strip()]


def int_list(value: str) -> list[int]:
    """Parse a comma-separated list of integers such as `1000,2000,4000`.

    Raises argparse.ArgumentTypeError naming the bad item.
    """
    items = []
    for item in csv_list(value):
        try:
            items.append(int(item))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{item!r} is not an integer") from exc
    return items

"""The `python -m core` command line, an entry point at the top of the house plan.

Each module in this package registers one command group (or top-level command) through a
`register(subparsers)` function; `main()` discovers them, so adding a group is adding a file.
Every command handler returns a `Result`; `--json` prints its data as one JSON object on stdout,
otherwise its text. Exit codes: 0 success, 2 bad input (InputError), 1 internal error.
It may import the library, `jobs` and `journeys`; `catalogue.py` builds from these parsers the
job catalogue it hands to the runner and the journeys, which never import the CLI themselves.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
import traceback
from typing import Sequence

from core.cli._guards import check_arguments, os_error_message
from core.cli.common import CliParser, Result
from core.errors import LinguaForgeError


def build_parser() -> argparse.ArgumentParser:
    """Return the top-level parser with every command group found in `core.cli` registered."""
    parser = CliParser(
        prog="python -m core",
        description="LinguaForge: teach a pretrained TTS model or GPT LM a new language.",
    )
    subparsers = parser.add_subparsers(dest="group", metavar="COMMAND", required=True)
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name == "common" or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(subparsers)
    return parser


def _printable(text: str) -> str:
    """Return `text` with what UTF-8 cannot hold (a lone surrogate from a hostile value) escaped."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _one_line(text: str) -> str:
    """Return `text` as one printable line: control characters (a newline, a terminal escape) escaped."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in _printable(text))


def _emit(result: Result, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(_printable(json.dumps(result.data, ensure_ascii=False, default=str)) + "\n")
    elif result.text:
        sys.stdout.write(_printable(result.text.rstrip("\n")) + "\n")
    sys.stdout.flush()


def _fail(message: str, code: int, as_json: bool, detail: str = "") -> int:
    sys.stderr.write(_one_line(f"error: {message}") + "\n")
    if as_json:
        _emit(Result({"ok": False, "error": message, **({"detail": detail} if detail else {})}), True)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run one CLI command and return its exit code (0 ok, 1 internal error, 2 bad input)."""
    return run_parsed(build_parser().parse_args(argv))


def run_parsed(args: argparse.Namespace) -> int:
    """Run the command of parsed arguments: the argument guards, then its handler; print its result or
    its error in one line; return the exit code (0 ok, 1 internal error, 2 bad input)."""
    as_json = bool(getattr(args, "json", False))
    try:
        check_arguments(args)
        result = args.handler(args)
    except LinguaForgeError as exc:
        return _fail(str(exc), exc.exit_code, as_json, exc.detail)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except Exception as exc:  # the CLI edge: report, never hide
        message = os_error_message(exc) if isinstance(exc, OSError) else None
        if message is not None:  # a path of the user's that cannot be read or written
            return _fail(message, 2, as_json)
        traceback.print_exc(file=sys.stderr)
        sys.stderr.write(f"internal error: {exc}\n")
        if as_json:
            _emit(Result({"ok": False, "error": f"internal error: {exc}"}), True)
        return 1
    _emit(result, as_json)
    return result.exit_code

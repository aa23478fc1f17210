"""The CLI reference, from the real parsers' `--help` text: the documentation site's `cli.md` page, made at
every build by `scripts/docs_hooks.py` (no copy is kept in the repository).

    .venv/bin/python scripts/cli_reference.py            # print the page
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
WIDTH = "100"


def _children(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _sections(parser: argparse.ArgumentParser, words: list[str]) -> list[str]:
    title = " ".join(["python -m core", *words])
    lines = [f"{'#' * min(len(words) + 2, 4)} `{title}`", "", "```text", parser.format_help().rstrip(), "```", ""]
    for name, child in _children(parser).items():
        lines += _sections(child, [*words, name])
    return lines


def render() -> str:
    """Return the CLI reference page: every command's `--help`, groups before their commands."""
    os.environ["COLUMNS"] = WIDTH
    sys.path.insert(0, str(REPO_ROOT))
    from core.cli import build_parser

    header = ["# CLI reference", "",
              "Generated from the parsers at every build of this site (`scripts/cli_reference.py`). Every command also",
              "takes `--json` (one JSON object on stdout). Exit codes: 0 success, 2 bad input, 1 internal error.", ""]
    return "\n".join(header + _sections(build_parser(), [])).rstrip() + "\n"


def main() -> int:
    """Print the CLI reference page; return the exit code."""
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())

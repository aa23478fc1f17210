"""Write docs/cli.md, the CLI reference, from the real parsers' `--help` text.

    .venv/bin/python scripts/cli_reference.py            # rewrite docs/cli.md
    .venv/bin/python scripts/cli_reference.py --check    # exit 1 when docs/cli.md is out of date
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
OUTPUT = REPO_ROOT / "docs" / "cli.md"
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
    """Return docs/cli.md's text: every command's `--help`, groups before their commands."""
    os.environ["COLUMNS"] = WIDTH
    sys.path.insert(0, str(REPO_ROOT))
    from core.cli import build_parser

    header = ["# CLI reference", "",
              "Generated from the parsers by `scripts/cli_reference.py`; do not edit by hand. Every command also",
              "takes `--json` (one JSON object on stdout). Exit codes: 0 success, 2 bad input, 1 internal error.", ""]
    return "\n".join(header + _sections(build_parser(), [])).rstrip() + "\n"


def main() -> int:
    """Write (or with --check compare) docs/cli.md; return the exit code."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when docs/cli.md differs")
    args = parser.parse_args()
    text = render()
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.is_file() else ""
        if current != text:
            print(f"{OUTPUT} is out of date; run scripts/cli_reference.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

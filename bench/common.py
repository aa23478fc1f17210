"""What every benchmark script shares: its command line's description and `--json` flag."""

from __future__ import annotations

import argparse


def bench_parser(doc: str | None) -> argparse.ArgumentParser:
    """Return an argument parser described by the benchmark's docstring, with the shared `--json` flag."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser

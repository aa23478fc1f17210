"""Turn pip's installation report into a requirements file of the exact files pip chose, for uv to install.

`scripts/setup_env.sh` lets pip resolve requirements.txt (`pip install --dry-run --report`), so pip's
configuration and its choice among several indexes hold (for one version pip takes the best-fitting wheel of all
indexes; uv would take the first index's, and on the test machine that was soundfile without its libsndfile), and
lets uv download, unpack and byte-compile those files in parallel. Each line is `name @ url --hash=...` when pip
reports the file's hash, so uv installs exactly the file pip resolved.

Usage: python scripts/pinned_wheels.py REPORT.json > pinned.txt
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def pinned_lines(report: dict[str, Any]) -> list[str]:
    """One requirement line per distribution pip would install: its name at the URL pip chose, with its hash."""
    lines = []
    for item in report["install"]:
        name = item["metadata"]["name"]
        download = item["download_info"]
        hashes = download.get("archive_info", {}).get("hashes", {})
        line = f"{name} @ {download['url']}"
        if "sha256" in hashes:
            line += f" --hash=sha256:{hashes['sha256']}"
        lines.append(line)
    return lines


def main(argv: list[str]) -> int:
    """Print the pinned requirement lines of the pip report named in `argv`."""
    if len(argv) != 1:
        print("usage: python scripts/pinned_wheels.py REPORT.json", file=sys.stderr)
        return 2
    print("\n".join(pinned_lines(json.loads(Path(argv[0]).read_text(encoding="utf-8")))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

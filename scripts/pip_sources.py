"""Print, one per line, the uv arguments that carry pip's package sources on this machine.

uv reads none of pip's configuration, so `scripts/setup_env.sh` hands it what `pip config list` reports (the
configuration files and the PIP_* environment together): the index, the extra indexes, the find-links folders and
the constraint files. Without them uv would miss the wheels that lie on this machine's disk and the caps its
administrator set. Values pip lists under several scopes (a file and the environment) are passed once.
"""

from __future__ import annotations

import shlex
import subprocess
import sys

# pip's configuration key -> uv's flag; each of these keys may hold several whitespace-separated values
FLAGS = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
}


def uv_arguments(pip_config_list: str) -> list[str]:
    """The uv arguments for the sources in `pip config list`'s output (lines `scope.key='value'`)."""
    arguments: list[str] = []
    seen: set[tuple[str, str]] = set()
    for line in pip_config_list.splitlines():
        name, _, value = line.partition("=")
        key = name.rpartition(".")[2]
        items = " ".join(shlex.split(value)).split()
        if key == "no-index":  # pip's switch: only the find-links folders are looked at
            if items and items[0].lower() in {"1", "true", "yes", "on"} and "--no-index" not in arguments:
                arguments.append("--no-index")
            continue
        for item in items if key in FLAGS else []:
            if (key, item) not in seen:
                seen.add((key, item))
                arguments += [FLAGS[key], item]
    return arguments


def main() -> int:
    """Print the uv arguments for this interpreter's pip configuration."""
    listing = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                             check=True).stdout
    print("\n".join(uv_arguments(listing)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

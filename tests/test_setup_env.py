"""./test.sh and ./run.sh install the requirements with uv, which reads none of pip's configuration:
`scripts/pip_sources.py` hands uv the package sources pip is configured with, so uv finds the same wheels on the
machine's disk and keeps the same caps."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from scripts.pip_sources import uv_arguments

REPO_ROOT = Path(__file__).resolve().parent.parent


def test_each_source_pip_lists_becomes_its_uv_flag_once() -> None:
    listing = "\n".join([
        ":env:.find-links='/opt/wheels'",
        ":env:.default-timeout='180'",
        "global.cert='/etc/ssl/certs/ca-certificates.crt'",
        "global.constraint='/etc/xdg/pip/constraints.txt'",
        "global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'",
        "global.find-links='/opt/wheels'",
        "global.index-url='https://mirror.example/simple'",
    ])
    assert uv_arguments(listing) == [
        "--find-links", "/opt/wheels",
        "--constraint", "/etc/xdg/pip/constraints.txt",
        "--extra-index-url", "file:///opt/pypi/simple", "--extra-index-url", "file:///opt/pypi-more/simple",
        "--index-url", "https://mirror.example/simple",
    ]


def test_pips_no_index_switch_is_passed_on_and_an_unset_one_is_not() -> None:
    assert uv_arguments("global.no-index='true'\nglobal.find-links='/wheels'") == [
        "--no-index", "--find-links", "/wheels"]
    assert uv_arguments("global.no-index='false'\nglobal.find-links='/wheels'") == ["--find-links", "/wheels"]


def test_the_script_reads_pips_own_configuration_from_the_environment(tmp_path: Path) -> None:
    constraints = tmp_path / "caps.txt"
    constraints.write_text("torch<=2.14.1\n", encoding="utf-8")
    env = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull,  # no configuration file: only what the environment says
               PIP_FIND_LINKS=str(tmp_path), PIP_EXTRA_INDEX_URL="file:///a/simple file:///b/simple",
               PIP_CONSTRAINT=str(constraints))
    printed = subprocess.run([sys.executable, "scripts/pip_sources.py"], cwd=REPO_ROOT, env=env,
                             capture_output=True, text=True, check=True).stdout.split()
    assert sorted(zip(printed[::2], printed[1::2])) == sorted([
        ("--find-links", str(tmp_path)), ("--constraint", str(constraints)),
        ("--extra-index-url", "file:///a/simple"), ("--extra-index-url", "file:///b/simple")])

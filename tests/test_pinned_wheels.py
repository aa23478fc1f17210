"""./test.sh and ./run.sh let pip resolve requirements.txt and uv install exactly the files pip chose:
`scripts/pinned_wheels.py` turns pip's installation report into those files' requirement lines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from scripts.pinned_wheels import pinned_lines

REPO_ROOT = Path(__file__).resolve().parent.parent
SOUNDFILE = "file:///opt/pypi-more/files/soundfile-0.14.0-py2.py3-none-manylinux_2_28_x86_64.whl"
REPORT = {  # the shape of `pip install --dry-run --report` (version 1), two of the test machine's entries
    "version": "1",
    "install": [
        {"metadata": {"name": "soundfile", "version": "0.14.0"}, "requested": True,
         "download_info": {"url": SOUNDFILE, "archive_info": {"hash": "sha256=1e38", "hashes": {"sha256": "1e38"}}}},
        {"metadata": {"name": "six", "version": "1.16.0"}, "requested": False,
         "download_info": {"url": "https://files.example/six-1.16.0-py2.py3-none-any.whl", "archive_info": {}}},
    ],
}


def test_each_file_pip_chose_becomes_a_line_with_its_hash_when_pip_knows_it() -> None:
    assert pinned_lines(REPORT) == [
        f"soundfile @ {SOUNDFILE} --hash=sha256:1e38",
        "six @ https://files.example/six-1.16.0-py2.py3-none-any.whl",
    ]


def test_the_script_prints_the_lines_of_a_report_file_and_refuses_without_one(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    report.write_text(json.dumps(REPORT), encoding="utf-8")
    script = [sys.executable, "scripts/pinned_wheels.py"]
    printed = subprocess.run([*script, str(report)], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert printed.stdout.splitlines() == pinned_lines(REPORT)
    refused = subprocess.run(script, cwd=REPO_ROOT, capture_output=True, text=True)
    assert refused.returncode == 2 and "usage:" in refused.stderr

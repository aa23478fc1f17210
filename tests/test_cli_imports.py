"""Building the CLI parser must stay cheap: every `python -m core …` call and every job pays for it."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO_ROOT

HEAVY = ("torch", "torchaudio", "numpy", "huey", "gradio", "sentencepiece", "tokenizers")


def test_building_the_parser_imports_no_heavy_library() -> None:
    code = (
        "import sys\n"
        "from core.cli import build_parser\n"
        "build_parser()\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"CLI modules import {out.stdout.strip()} at load; import inside handlers"

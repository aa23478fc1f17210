"""The documentation: the site builds strictly (no broken link, anchor or reference), its generated pages
come from the code, it fetches nothing, every doctor check has its troubleshooting row, and the README's
five-minute tour runs as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import soundfile
import yaml

from core.checks.doctor import discover_checks
from core.config import REPO_ROOT
from core.training.run_config import run_config_from_dict
from tests.data_helpers import require_espeak

README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"
TOUR_MARK = "<!-- tour: tests/test_docs.py runs this block as written"
EXTERNAL = re.compile(r"""(?:src|href)=["'](?:https?:)?//""")


def tour_block() -> str:
    """Return the README's tour: the first ```bash block after its marker comment."""
    text = README.read_text(encoding="utf-8")
    assert TOUR_MARK in text, "the README lost its tour marker"
    match = re.search(r"```bash\n(.*?)```", text[text.index(TOUR_MARK):], re.S)
    assert match, "no ```bash block after the tour marker"
    return match.group(1)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once by `mkdocs build --strict` into a temporary folder."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                         cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    return out


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_the_site_builds_strictly_with_the_cli_and_library_reference_made_from_the_code(site: Path) -> None:
    from core.cli import build_parser

    cli = (site / "cli.html").read_text(encoding="utf-8")
    groups = [name for action in build_parser()._actions if hasattr(action, "choices") and action.choices
              for name in action.choices]
    assert len(groups) > 15
    for group in groups:  # every top-level command has its section, from the parser itself
        assert f"python -m core {group}" in cli, group
    assert "--base-sentences" in cli  # an option added with this page: nothing copied by hand
    library = (site / "reference" / "core.eval.html").read_text(encoding="utf-8")
    assert "evaluate_with_base_language" in library and "the same measures" in library  # its docstring
    assert (site / "reference" / "journeys.html").is_file() and (site / "benchmarks.html").is_file()


def test_the_site_fetches_nothing_when_read(site: Path) -> None:
    """No web fonts, scripts or styles from elsewhere: the pages read offline (`font: false`, no fetching plugins)."""
    for page in site.rglob("*.html"):
        head = page.read_text(encoding="utf-8").split("</head>")[0]
        assert not EXTERNAL.search(head), (page, EXTERNAL.search(head).group(0))
    assert not list(site.rglob("*.woff*"))


def test_every_doctor_check_has_a_troubleshooting_row() -> None:
    documented = set(re.findall(r"^\| `([a-z_.]+)` \|", (DOCS / "troubleshooting.md").read_text(encoding="utf-8"), re.M))
    registered = {check_id for check_id, _ in discover_checks()}
    assert registered - documented == set(), "doctor checks without a row in docs/troubleshooting.md"
    assert documented - registered == set(), "rows in docs/troubleshooting.md for checks that no longer exist"


def test_the_readme_stays_a_front_door() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    for heading in ("## Two commands", "## A five-minute tour", "## Where to go next"):
        assert f"\n{heading}\n" in text, heading
    assert "\n./run.sh " in text and "\n./test.sh " in text


def test_run_configs_shown_in_the_docs_are_valid() -> None:
    """Every ```yaml block that shows a run config (its first line names `runs_cfg/…`) parses as one."""
    shown = 0
    for page in DOCS.rglob("*.md"):
        for block in re.findall(r"```yaml\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
            if block.startswith("# runs_cfg/"):
                run_config_from_dict(yaml.safe_load(block), f"{page.name}")
                shown += 1
    assert shown >= 1


@pytest.mark.slow
def test_the_readme_tour_runs_as_written(tmp_path: Path) -> None:
    """The tour's commands, exactly as the README shows them, in a fresh workspace (a checkout's folder layout:
    `.venv` beside it, `./workspace`): the doctor passes the extended pair and refuses the mismatched one, and
    the fine-tuned model speaks Amharic into a wav."""
    require_espeak()
    (tmp_path / ".venv").symlink_to(REPO_ROOT / ".venv")
    workspace = tmp_path / "workspace"
    env = {**os.environ, "LINGUAFORGE_WORKSPACE": str(workspace), "PYTHONPATH": str(REPO_ROOT)}
    env.pop("LINGUAFORGE_SETTINGS", None)
    run = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", tour_block()], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "doctor: all checks passed" in run.stdout
    assert re.search(r"checkpoint\.rows\s+FAIL", run.stdout) and "refused, as it should be" in run.stdout
    audio, rate = soundfile.read(workspace / "tour.wav")
    assert rate == 16000 and len(audio) > rate // 4 and abs(audio).max() > 0

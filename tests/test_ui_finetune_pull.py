"""The Fine-tune tab's Pull button: `models pull` of the family's recommended release submitted as a job of the
dashboard's runner (a real worker), resolved offline from a Hub cache the test builds in the real layout
(tests/hub_helpers.py), the pulled folder chosen and the guide no longer saying none was found; a release the
cache lacks refused in words naming the repository."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from core.cli.catalogue import cli_catalogue
from core.config import load_settings
from core.errors import InputError
from gradio_app.runner import JobRunner
from gradio_app.tabs.finetune import pull_steps
from tests.hub_helpers import cache_repo, folder_files

pytestmark = pytest.mark.slow  # builds (once a session) the reduced Chatterbox folder; the pull runs as a job


@pytest.fixture
def dashboard_runner(workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The dashboard's runner with its worker, HF_HOME in the test's folder and offline (the jobs inherit both)."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    runner = JobRunner(load_settings(), cli_catalogue())
    runner.start_worker()
    try:
        yield runner
    finally:
        runner.stop_worker()


def test_pull_fills_the_model_folder_from_the_hub_cache_and_chooses_it(dashboard_runner, workspace: Path,
                                                                       tmp_path: Path) -> None:
    from tests.chatterbox_helpers import make_chatterbox_folder

    release = make_chatterbox_folder(tmp_path / "release")
    shutil.copyfile(release / "t3_mtl23ls_v2.safetensors", release / "t3_mtl23ls_v3.safetensors")
    commit = cache_repo(tmp_path / "hf", "ResembleAI/chatterbox", folder_files(release))
    settings = load_settings()

    steps = list(pull_steps(dashboard_runner, settings, "Chatterbox"))
    line, folder, guide = steps[-1]
    assert line.startswith("Release pull job `") and "**succeeded**" in line
    assert line.endswith("→ Chatterbox multilingual v3 in `models/chatterbox-v3`; chosen as the model folder. "
                         "Check the folder next.")
    assert folder["value"] == "models/chatterbox-v3" and "models/chatterbox-v3" in folder["choices"]
    assert not guide.startswith("**No Chatterbox model folder")  # the list finds the pulled folder
    record = json.loads((workspace / "models" / "chatterbox-v3" / "hub_release.json").read_text(encoding="utf-8"))
    assert record["release"] == "chatterbox:v3" and record["sources"][0]["revision"] == commit
    assert (workspace / "models" / "chatterbox-v3" / "t3_mtl23ls_v3.safetensors").read_bytes() == \
        (release / "t3_mtl23ls_v3.safetensors").read_bytes()


def test_a_release_the_cache_lacks_is_refused_naming_the_repository(dashboard_runner, workspace: Path) -> None:
    with pytest.raises(InputError, match=r"release pull job \S+ failed: .*IndexTeam/IndexTTS-2: not in the Hub cache "
                                         r"and HF_HUB_OFFLINE=1 is set"):
        list(pull_steps(dashboard_runner, load_settings(), "IndexTTS2"))
    assert not (workspace / "models" / "indextts2").exists()

"""A disk that runs out: the doctor refuses a run whose folder cannot hold one checkpoint, and a save
that runs out of space mid-write ends in one line that names the file, with the older file intact.

The small disk is a real tmpfs of a few hundred KiB, mounted over the workspace's runs/ folder inside
a private mount namespace (`unshare -Urm`), so nothing of the machine's own disk is filled.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.trainer_helpers import lm_config, lm_workspace


def _on_small_disk(mount: Path, size_kib: int, argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run `argv` with a `size_kib` KiB tmpfs mounted at `mount` (a private mount: gone when it exits)."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    mount.mkdir(parents=True, exist_ok=True)
    script = f'mount -t tmpfs -o size={size_kib}k tmpfs "$0" && exec "$@"'
    probe = subprocess.run(["unshare", "-Urm", "sh", "-c", script, str(mount), "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"no private tmpfs mount here (unshare -Urm, mount -t tmpfs): {probe.stderr.strip()}")
    return subprocess.run(["unshare", "-Urm", "sh", "-c", script, str(mount), *argv], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


SAVE_TWICE = """
import json, os, sys, torch
from core.checkpoint import load_checkpoint, save_checkpoint
from core.errors import InputError
path = os.path.join(sys.argv[1], "step_0000001.pt")
save_checkpoint(path, {"w": torch.ones(1000)}, None, {"step": 1})
try:
    save_checkpoint(path, {"w": torch.zeros(1_000_000)}, None, {"step": 2})   # 4 MB onto a 512 KiB disk
    error = None
except InputError as exc:
    error = str(exc)
loaded = load_checkpoint(path)
print(json.dumps({"error": error, "files": sorted(os.listdir(sys.argv[1])), "step": loaded.extra["step"],
                  "sum": float(loaded.state_dict["w"].sum())}))
"""


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_a_checkpoint_save_that_runs_out_of_disk_names_the_file_and_keeps_the_old_one(tmp_path: Path) -> None:
    folder = tmp_path / "small"
    done = _on_small_disk(folder, 512, [sys.executable, "-c", SAVE_TWICE, str(folder)])
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["error"].startswith(f"{folder / 'step_0000001.pt'}: the disk ran out of space while writing this checkpoint")
    assert "lower schedule.keep_last" in result["error"] and "\n" not in result["error"]
    assert result["files"] == ["step_0000001.pt"]                  # no temporary file left behind
    assert result["step"] == 1 and result["sum"] == 1000.0          # the older checkpoint is whole


@pytest.mark.slow  # 74 s at load 12 (issue 50: the quick loop keeps tests under ~5 s)
def test_training_on_a_disk_too_small_is_refused_before_training_or_ends_in_one_line_at_the_save(workspace: Path) -> None:
    """runs/ on 64 KiB: the doctor fails `disk.checkpoints` (the weights do not fit) and nothing trains.
    On 1.5 MiB the weights (0.9 MiB) fit, so the doctor only warns; the first save runs out of space and the run
    ends with exit 2 and one line naming the checkpoint, the run folder readable."""
    lm_workspace(workspace)
    config = lm_config(workspace, "small", model={"d_model": 64, "n_layers": 2, "n_heads": 4, "max_text_tokens": 32})
    env = {"LINGUAFORGE_WORKSPACE": str(workspace), "PATH": "/usr/bin:/bin", "HOME": str(workspace)}
    argv = [sys.executable, "-m", "core", "train", "--config", str(config), "--json"]

    refused = _on_small_disk(workspace / "runs", 64, argv, env)
    assert refused.returncode == 2, refused.stderr[-2000:]
    failure = json.loads(refused.stdout)
    assert "disk.checkpoints" in failure["error"] and "the first save would fail" in failure["detail"]
    assert "Traceback" not in refused.stderr

    ran_out = _on_small_disk(workspace / "runs", 1536, argv, env)
    assert ran_out.returncode == 2, (ran_out.stdout[-1000:], ran_out.stderr[-2000:])
    error = json.loads(ran_out.stdout)["error"]
    assert "step_0000003.pt: the disk ran out of space while writing this checkpoint" in error, error
    assert "Traceback" not in ran_out.stderr

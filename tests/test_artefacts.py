"""tests/artefacts.py: an artefact is built once per run whichever xdist worker asks for it, keyed by its
inputs, its code and its packages' versions; a failed build leaves nothing taken for finished; the run's
artefacts go when the run ends."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.artefacts import artefact_key, built_once
from tests.conftest import REPO_ROOT

# Four files on two workers ask for the same artefact at once; each build appends a line to BUILDS.
# The build takes a second so that the workers' requests overlap (the race the lock is for).
ASKING_FILE = """
import time
from pathlib import Path
from tests.artefacts import built_once

def build(folder):
    with open({builds!r}, "a") as log:
        log.write("built\\n")
    time.sleep(1.0)
    (folder / "weights.bin").write_bytes(b"w" * 1000)

def test_asks():
    folder = built_once("shared", {{"size": 1000}}, [Path(__file__).with_name("conftest.py")], build)
    assert (folder / "weights.bin").read_bytes() == b"w" * 1000
    Path({seen!r}).joinpath(Path(__file__).stem).write_text(str(folder))
"""


@pytest.mark.slow
def test_four_files_on_two_workers_share_one_build_and_the_run_removes_it(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    builds, seen = tmp_path / "builds.log", tmp_path / "seen"
    seen.mkdir()
    pytester.makeconftest('pytest_plugins = ("tests.artefacts",)\n')
    body = ASKING_FILE.format(builds=str(builds), seen=str(seen))
    for index in range(4):  # the same inputs and source (conftest.py) in all four: one key
        pytester.makepyfile(**{f"test_ask{index}": body})
    result = pytester.runpytest_subprocess("-p", "xdist", "-n", "2", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)
    assert builds.read_text().splitlines() == ["built"]
    folders = {path.read_text() for path in seen.iterdir()}
    assert len(folders) == 1 and len(list(seen.iterdir())) == 4
    (folder,) = folders
    assert Path(folder).parent.name == "artefacts" and not Path(folder).exists()  # gone with the run


def test_the_key_changes_with_the_inputs_the_source_and_the_package_versions(tmp_path: Path) -> None:
    source = tmp_path / "make.py"
    source.write_text("SIZE = 1\n")
    key = artefact_key({"size": 1}, [source], ["torch"])
    assert key == artefact_key({"size": 1}, [source], ["torch"]) and len(key) == 16
    assert key != artefact_key({"size": 2}, [source], ["torch"])
    assert key != artefact_key({"size": 1}, [source], ["torch", "safetensors"])
    source.write_text("SIZE = 2\n")
    assert key != artefact_key({"size": 1}, [source], ["torch"])


def test_a_failed_build_is_not_taken_for_a_finished_one(tmp_path: Path) -> None:
    source = tmp_path / "make.py"
    source.write_text(f"# {tmp_path}\n")  # a key of this test's own

    def broken(folder: Path) -> None:
        (folder / "half.bin").write_bytes(b"h")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        built_once("flaky", {}, [source], broken)
    calls = []

    def whole(folder: Path) -> None:
        calls.append(folder)
        (folder / "whole.bin").write_bytes(b"w")

    folder = built_once("flaky", {}, [source], whole)
    assert sorted(p.name for p in folder.iterdir()) == ["whole.bin"] and len(calls) == 1
    assert built_once("flaky", {}, [source], whole) == folder and len(calls) == 1  # built once


def test_a_copy_leaves_torchs_random_state_as_building_it_would(tmp_path: Path) -> None:
    """A caller that built the artefact itself went on from the state the build left; one that copies it does too."""
    import torch

    from tests.artefacts import copy_artefact, leave_rng_as_built

    source = tmp_path / "make.py"
    source.write_text(f"# {tmp_path}\n")

    def build(folder: Path) -> None:
        torch.manual_seed(3)
        torch.save(torch.rand(5), folder / "weights.pt")

    torch.manual_seed(3)
    torch.rand(5)
    expected = torch.rand(4)
    built = built_once("seeded", {}, [source], build, keep_rng=True)
    torch.manual_seed(99)  # whatever the caller's state was
    leave_rng_as_built(built)
    assert torch.equal(torch.rand(4), expected)
    copied = copy_artefact(built, tmp_path / "copy")
    assert sorted(p.name for p in copied.iterdir()) == ["weights.pt"]  # the random state is not copied

"""Expensive test artefacts built once per test run and shared by every pytest-xdist worker.

`built_once(name, inputs, sources, build)` returns a folder that `build(folder)` filled, kept in
`<basetemp root>/artefacts/<name>-<key>/`, where the key hashes the inputs, the bytes of the source files
that make the artefact and the versions of the packages it uses: a change to any of them builds it
anew. A file lock per artefact makes one worker build while the others wait for it; a build goes into a
`.partial` folder renamed into place only when complete, so a crashed build is never taken for a finished
one. Callers copy what they need out of it (the shared folder is read-only by convention): each test
starts from a copy. The folder goes at the end of the run (the controller's `pytest_sessionfinish`).
Outside pytest (bench/ scripts use the test helpers) the artefacts live in a temporary folder of the process.

Loaded from tests/conftest.py (`pytest_plugins`), which gives it the run's basetemp.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import shutil
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Iterable

import pytest
from filelock import FileLock

_CONFIG: pytest.Config | None = None
_PROCESS_ROOT: Path | None = None
RNG_FILE = "torch_rng_state.pt"


def _artefact_root(config: pytest.Config) -> Path:
    """`<basetemp root>/artefacts`: xdist's workers have `<root>/popen-gwN` as their basetemp."""
    base = config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    return (base.parent if hasattr(config, "workerinput") else base) / "artefacts"


def pytest_configure(config: pytest.Config) -> None:
    """Keep the run's config: its basetemp says where the artefacts live (the same folder in every worker)."""
    global _CONFIG
    _CONFIG = config


def _process_root() -> Path:
    """Outside pytest (bench/ scripts call the test helpers): a temporary folder of this process, removed at exit."""
    global _PROCESS_ROOT
    if _PROCESS_ROOT is None:
        _PROCESS_ROOT = Path(tempfile.mkdtemp(prefix="lf-artefacts-"))
        atexit.register(shutil.rmtree, _PROCESS_ROOT, True)
    return _PROCESS_ROOT


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Delete the run's artefacts once every worker is done: on the controller, or the only process."""
    if not hasattr(session.config, "workerinput"):
        shutil.rmtree(_artefact_root(session.config), ignore_errors=True)


def artefact_key(inputs: dict[str, Any], sources: Iterable[Path], packages: Iterable[str] = ()) -> str:
    """A 16-hex-digit key of the inputs (as JSON), the sources' bytes and the packages' versions."""
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode())
    for source in sorted(Path(s).resolve() for s in sources):
        digest.update(str(source).encode() + b"\0" + source.read_bytes())
    for package in sorted(packages):
        digest.update(f"{package}=={metadata.version(package)}".encode())
    return digest.hexdigest()[:16]


def built_once(name: str, inputs: dict[str, Any], sources: Iterable[Path], build: Callable[[Path], None],
               packages: Iterable[str] = (), keep_rng: bool = False) -> Path:
    """Return the folder of artefact `name` built by `build(folder)` from `inputs` (once per run, whichever
    worker asks first; the others wait on its lock). `sources` are the files of the code that makes it and
    `packages` the installed distributions it uses: both go into the key with the inputs. `keep_rng` saves
    torch's random state as the build left it (RNG_FILE), for `leave_rng_as_built`."""
    root = _artefact_root(_CONFIG) if _CONFIG is not None else _process_root()
    root.mkdir(parents=True, exist_ok=True)
    folder = root / f"{name}-{artefact_key(inputs, sources, packages)}"
    with FileLock(str(folder) + ".lock"):
        if not folder.is_dir():
            partial = folder.with_name(folder.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir()
            build(partial)
            if keep_rng:
                import torch

                torch.save(torch.get_rng_state(), partial / RNG_FILE)
            partial.rename(folder)
    return folder


def leave_rng_as_built(folder: Path) -> None:
    """Set torch's random state to the one the build of `folder` left (`keep_rng`): a caller that built the
    artefact itself before continued from that state, and a copy must not change what comes after it."""
    import torch

    torch.set_rng_state(torch.load(folder / RNG_FILE, weights_only=True))


def copy_artefact(folder: Path, dest: Path) -> Path:
    """Copy the artefact `folder`'s files into `dest` (created; existing files kept) and return `dest`."""
    shutil.copytree(folder, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns(RNG_FILE))
    return dest

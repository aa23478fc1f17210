"""Settings loader shared by every entry point (CLI, jobs, dashboard).

`load_settings()` reads `config/default.yaml`, applies an optional user YAML on top (the file
given, else the one `LINGUAFORGE_SETTINGS` names) and the `LINGUAFORGE_WORKSPACE` environment
variable, and returns a `Settings` object whose `resolve()` turns workspace-relative paths into
absolute ones. A job's process gets `LINGUAFORGE_SETTINGS` from its worker (the settings file
recorded with the job), so every command of a job sees the settings it was submitted with.

The settings file is the operator's: it is named only by whoever starts the app or a worker
(`app.py --config`, `worker --settings`), never by a job, an upload or a dashboard field. It
*defines* the roots — `workspace`, `data_roots` and the model folders
`families.<family>.model_dir` — so it is not confined itself, and what else it names
(`tokenizer.default`, IndexTTS2's helper overrides) is trusted like a path typed on the command
line. Every path that comes from anywhere else — job parameters, run configs, presets, dashboard
fields — must lie inside those roots (`check_inside_roots`).
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.confine import check_path_text, is_inside
from core.errors import InputError
from core.structured import read_yaml_file

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = REPO_ROOT / "config" / "default.yaml"
WORKSPACE_ENV = "LINGUAFORGE_WORKSPACE"
SETTINGS_ENV = "LINGUAFORGE_SETTINGS"
#: the host names that reach this machine only (a server there needs no token)
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def read_yaml(path: Path) -> dict[str, Any]:
    """Return the mapping stored in the YAML file `path`.

    Raises InputError when the file is missing, is not valid YAML or does not hold a mapping.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: file not found. Check the path or create it.")
    try:
        data = read_yaml_file(path)
    except OSError as exc:
        raise InputError(f"{path}: cannot read it ({exc.strerror or exc}). Check the file's permissions.") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping of keys to values, found {type(data).__name__}.")
    return data


def merge_dicts(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Return a deep copy of `base` with `override` merged in (nested mappings merge key by key)."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_dicts(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


@dataclass
class Settings:
    """Resolved application settings: the workspace root, the raw configuration mapping and the
    settings file applied over the defaults (`source`, absolute; None for the defaults alone)."""

    workspace: Path
    data: dict[str, Any] = field(default_factory=dict)
    source: Path | None = None

    def resolve(self, path: str | os.PathLike[str]) -> Path:
        """Return `path` as an absolute path; relative paths resolve against the workspace.

        Raises InputError when `path` cannot name a file (a NUL byte, not UTF-8 text: `check_path_text`).
        """
        candidate = Path(os.path.expanduser(check_path_text(path if isinstance(path, os.PathLike) else str(path), "path")))
        if not candidate.is_absolute():
            candidate = self.workspace / candidate
        return candidate.resolve()

    @property
    def allowed_roots(self) -> list[Path]:
        """Folders the application may read and write: the workspace and configured data roots."""
        roots = [self.workspace]
        for root in self.data.get("data_roots") or []:
            roots.append(Path(os.path.expanduser(check_path_text(str(root), "settings data_roots entry"))).resolve())
        return roots

    @property
    def model_roots(self) -> list[Path]:
        """Folders of published models named in the settings (`families.<family>.model_dir`), resolved.

        A run config's `model_dir:` may point into these as well as into `allowed_roots`.
        """
        families = self.data.get("families") or {}
        values = [entry.get("model_dir") for entry in families.values() if isinstance(entry, dict)]
        return [self.resolve(value) for value in values if value]

    def check_inside_roots(self, path: str | os.PathLike[str], model_folders: bool = False) -> Path:
        """Return the resolved `path` (relative: against the workspace) when it lies inside an allowed root,
        or, with `model_folders`, inside a model folder of the settings (`model_roots`).

        Raises InputError naming the path and the allowed roots otherwise.
        """
        resolved = self.resolve(path)
        roots = self.allowed_roots + (self.model_roots if model_folders else [])
        if is_inside(resolved, roots):
            return resolved
        names = ", ".join(str(r) for r in roots)
        fix = ("Move the file into the workspace or add its folder to `data_roots` in the settings file"
               + (" (or set it as families.<family>.model_dir there)." if model_folders else "."))
        raise InputError(f"{resolved}: outside the allowed folders ({names}). {fix}")

    def get(self, dotted: str, default: Any = None) -> Any:
        """Return the setting at a dotted key such as `queue.url`, or `default` when absent."""
        node: Any = self.data
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node


def load_settings(config_path: str | os.PathLike[str] | None = None) -> Settings:
    """Return Settings from the defaults, an override YAML and the environment.

    The override is `config_path`, else the file `LINGUAFORGE_SETTINGS` names, else none.
    Raises InputError when a YAML file is missing or malformed.
    """
    data = read_yaml(DEFAULT_CONFIG)
    if config_path is None:
        config_path = os.environ.get(SETTINGS_ENV) or None
    source = Path(os.path.expanduser(str(config_path))).absolute() if config_path is not None else None
    if source is not None:
        data = merge_dicts(data, read_yaml(source))
    workspace = os.environ.get(WORKSPACE_ENV) or data.get("workspace") or "./workspace"
    root = Path(os.path.expanduser(str(workspace)))
    if not root.is_absolute():
        root = REPO_ROOT / root
    return Settings(workspace=root.resolve(), data=data, source=source)

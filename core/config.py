"""Settings loader shared by every entry point (CLI, jobs, dashboard).

`load_settings()` reads `config/default.yaml`, applies an optional user YAML on top (the file
given, else the one `LINGUAFORGE_SETTINGS` names) and the `LINGUAFORGE_WORKSPACE` environment
variable, and returns a `Settings` object whose `resolve()` turns workspace-relative paths into
absolute ones. A job's process gets `LINGUAFORGE_SETTINGS` from its worker (the settings file
recorded with the job), so every command of a job sees the settings it was submitted with.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from core.errors import InputError

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = REPO_ROOT / "config" / "default.yaml"
WORKSPACE_ENV = "LINGUAFORGE_WORKSPACE"
SETTINGS_ENV = "LINGUAFORGE_SETTINGS"


def read_yaml(path: Path) -> dict[str, Any]:
    """Return the mapping stored in the YAML file `path`.

    Raises InputError when the file is missing, is not valid YAML or does not hold a mapping.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: file not found. Check the path or create it.")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        detail = " ".join(str(exc).split())
        raise InputError(f"{path}{where}: not valid YAML ({detail}). Fix the syntax.") from exc
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text ({exc}). Save it as UTF-8.") from exc
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
        """Return `path` as an absolute path; relative paths resolve against the workspace."""
        candidate = Path(os.path.expanduser(str(path)))
        if not candidate.is_absolute():
            candidate = self.workspace / candidate
        return candidate.resolve()

    @property
    def allowed_roots(self) -> list[Path]:
        """Folders the application may read and write: the workspace and configured data roots."""
        roots = [self.workspace]
        for root in self.data.get("data_roots") or []:
            roots.append(Path(os.path.expanduser(str(root))).resolve())
        return roots

    def check_inside_roots(self, path: str | os.PathLike[str]) -> Path:
        """Return the resolved `path` when it lies inside an allowed root.

        Raises InputError naming the path and the allowed roots otherwise.
        """
        resolved = self.resolve(path)
        for root in self.allowed_roots:
            if resolved == root or root in resolved.parents:
                return resolved
        roots = ", ".join(str(r) for r in self.allowed_roots)
        raise InputError(
            f"{resolved}: outside the allowed folders ({roots}). Move the file into the workspace "
            "or add its folder to `data_roots` in the config."
        )

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

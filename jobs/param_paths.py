"""Where job parameters may point: inside the workspace, or absolute inside a configured data root.

A job runs with the workspace as its working directory, so a relative parameter resolves there;
`../` that climbs out, or an absolute path outside every allowed root, is refused at submission.
Which parameters are paths is not listed here: the job catalogue reports each kind's path-typed
options (`JobCatalogue.path_options`, read from the command's parser), so a new path option is
confined the day it is added. Names (`name`) are one path segment. A model folder (`model_dir`) may
also be one the settings name (`families.<family>.model_dir`), as in a run config.

Some commands read further paths out of what they are given (the rows of a manifest name audio
files): their confinement is an option of the command, and `job_params` turns it on for every job
(`JOB_VALUES`), whatever the submission says, so a job never copies a file from outside the roots.
The same table keeps a `serve` job from listening beyond this machine without a token.
"""

from __future__ import annotations

from typing import Any, Mapping

from core.config import LOOPBACK_HOSTS, Settings
from core.confine import check_name, shown
from core.errors import InputError
from core.paths import PathType

NAME_PARAMS = frozenset({"name"})
MODEL_FOLDER_PARAMS = frozenset({"model_dir"})
# kind -> parameters every job of that kind runs with, whatever its submission says
JOB_VALUES: dict[str, dict[str, Any]] = {
    "dataset.import": {"confine_to_roots": True},
    "dataset.filter": {"confine_to_roots": True},
    "serve": {"without_token": False},  # a serve job beyond 127.0.0.1 needs a token: its warning would be in a log only
}


def job_params(kind: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """Return a copy of `params` with the values every job of `kind` runs with (`JOB_VALUES`) set over them."""
    return {**params, **JOB_VALUES.get(kind, {})}


def check_job_params(settings: Settings, kind: str, params: dict[str, Any], path_types: Mapping[str, PathType]) -> None:
    """Check every path parameter of a job against the allowed roots and every name parameter, and that a
    `serve` job listening beyond this machine names its token file.

    `path_types` maps the kind's path parameters to their PathType (its keywords, such as `auto`,
    are not paths). Raises InputError naming the kind, the parameter and the value when one points
    outside the workspace and the data roots (a model folder: and the settings' model folders), a name
    is not one path segment, or a serve job has a `host` other than this machine's and no `token_file`.
    """
    host = params.get("host")
    if kind == "serve" and host is not None and str(host) not in LOOPBACK_HOSTS and not params.get("token_file"):
        raise InputError(f"serve: parameter host={shown(host)}: a serve job listening beyond this machine needs token_file "
                         "(a file in the workspace holding the bearer token clients must send).")
    for key, value in params.items():
        items = value if isinstance(value, (list, tuple)) else [value]
        for item in items:
            if item is None:
                continue
            if key in NAME_PARAMS:
                check_name(item, f"{kind}: parameter {key}")
            elif key in path_types and path_types[key].is_path(str(item)):
                for part in {str(item), *str(item).split(",")}:
                    try:
                        settings.check_inside_roots(part.strip() or ".", model_folders=key in MODEL_FOLDER_PARAMS)
                    except InputError as exc:
                        raise InputError(f"{kind}: parameter {key}={shown(item)}: {exc}") from None

"""The model-family registry: `get_model_family(name)` returns the family's `ModelFamily`.

Family modules import lazily, so asking for `linguaforge` never imports a published model's code.
"""

from __future__ import annotations

import importlib

from core.errors import InputError
from core.families.base import ModelFamily

#: family name → "module:Class"
MODEL_FAMILIES: dict[str, str] = {
    "linguaforge": "core.families.linguaforge.family:LinguaForgeFamily",
    "chatterbox": "core.families.chatterbox.family:ChatterboxFamily",
    "indextts": "core.families.indextts.family:IndexTTSFamily",
    "chatterbox-turbo": "core.families.chatterbox_turbo.family:ChatterboxTurboFamily",
    "csm": "core.families.csm.family:CsmFamily",
}
_INSTANCES: dict[str, ModelFamily] = {}


def model_family_names() -> tuple[str, ...]:
    """Return the names of the registered model families."""
    return tuple(MODEL_FAMILIES)


def get_model_family(name: str) -> ModelFamily:
    """Return the ModelFamily `name` (one instance per process).

    Raises InputError listing the families for an unknown name, or naming the missing package
    when the family's published code is not installed.
    """
    if name not in MODEL_FAMILIES:
        raise InputError(f"unknown model family {name!r}; known families: {', '.join(MODEL_FAMILIES)}.")
    if name not in _INSTANCES:
        module_name, class_name = MODEL_FAMILIES[name].split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            raise InputError(
                f"model family {name!r} needs the package providing {exc.name!r}; install requirements.txt."
            ) from exc
        _INSTANCES[name] = getattr(module, class_name)()
    return _INSTANCES[name]

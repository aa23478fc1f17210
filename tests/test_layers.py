"""The house plan holds: imports only point down, read from the source with `ast` (nothing is imported).

Layers, bottom to top: `models` ← `core` (the library) ← `jobs` (the runner) ← `journeys` ← the
entry points `core.cli` (with `core/__main__.py`), `gradio_app` and `app.py`. A module may import
its own layer's package and the layers below it, never one above it nor a sibling entry point.
Gradio and its server stack belong to the dashboard and to the speech server (`core.serve`, a layer
of its own above the library that only the CLI's `serve` imports), Huey to the runner; inside the dashboard only
`gradio_app/runner.py` (its one door to the runner) imports `jobs`. Lazy imports inside functions
and `importlib.import_module("…")` / `__import__("…")` calls with a literal name count too.

Inside `core`, its sub-packages (`core.data`, `core.training`, …) and its top-level modules
(`core.checkpoint`, `core.runs`, …) are the nodes of an import graph that must hold no circle, and
`core.families` (model families, a component the trainer, the doctor and evaluation use) imports
none of `core.training`, `core.checks`, `core.eval`. Inside `core.families` the modules themselves
import in no circle either: each family is a leaf module (its config and model) with its class on top.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("core", "models", "jobs", "journeys", "gradio_app", "app.py")

# unit -> rank; an import must go to a strictly lower rank or stay inside its own unit
RANKS = {"models": 0, "core": 1, "jobs": 2, "journeys": 3, "core.serve": 3, "core.cli": 4, "gradio_app": 4, "app": 5}
# third-party packages only these units may import
EXTERNAL_OWNERS = {
    "gradio": ("gradio_app", "app"),
    "fastapi": ("gradio_app", "app", "core.serve"),
    "starlette": ("gradio_app", "app", "core.serve"),
    "uvicorn": ("gradio_app", "app", "core.serve"),
    "huey": ("jobs",),
}
RUNNER_DOOR = "gradio_app.runner"


@dataclass(frozen=True)
class Violation:
    """One import that breaks the plan: where it is and which edge it draws."""

    path: str
    line: int
    source: str
    target: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.source} -> {self.target} ({self.reason})"


def unit_of(module: str) -> str | None:
    """Return the layer unit of a first-party module name, or None for anything else."""
    if module == "core.__main__" or module == "core.cli" or module.startswith("core.cli."):
        return "core.cli"
    if module == "core.serve" or module.startswith("core.serve."):
        return "core.serve"
    top = module.split(".", 1)[0]
    return top if top in RANKS else None


def module_name(root: Path, path: Path) -> str:
    """Return the dotted module name of `path` (a .py file under `root`)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(root: Path, module: str) -> bool:
    path = root.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _literal_import_call(node: ast.Call) -> str | None:
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if name not in ("import_module", "__import__") or not node.args:
        return None
    first = node.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str) and not first.value.startswith("."):
        return first.value
    return None


def imported_modules(root: Path, path: Path) -> list[tuple[int, str]]:
    """Return (line, module) for every import in `path`: statements at any depth and literal import calls."""
    source = module_name(root, path)
    package = source if path.name == "__init__.py" else source.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*base_parts, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.append((node.lineno, candidate if _is_module(root, candidate) else base))
        elif isinstance(node, ast.Call):
            target = _literal_import_call(node)
            if target:
                found.append((node.lineno, target))
    return found


def _reason(source: str, target: str) -> str | None:
    source_unit, target_unit = unit_of(source), unit_of(target)
    if source_unit is None:
        return None
    if target_unit is None:
        owners = EXTERNAL_OWNERS.get(target.split(".", 1)[0])
        if owners is not None and source_unit not in owners:
            return f"only {', '.join(owners)} may import {target.split('.', 1)[0]}"
        return None
    if target_unit == source_unit:
        return None
    if RANKS[target_unit] >= RANKS[source_unit]:
        return f"{source_unit} may not import {target_unit}: imports point down only"
    if source_unit == "gradio_app" and target_unit == "jobs" and source != RUNNER_DOOR:
        return f"the dashboard reaches the runner only through {RUNNER_DOOR}"
    return None


def find_upward_imports(root: Path) -> list[Violation]:
    """Return every import under `root` (its core, models, jobs, journeys, gradio_app, app.py) that breaks the plan."""
    files: list[Path] = []
    for name in SCANNED:
        target = root / name
        files.extend(sorted(target.rglob("*.py")) if target.is_dir() else [target] if target.is_file() else [])
    violations = []
    for path in files:
        source = module_name(root, path)
        for line, target in imported_modules(root, path):
            reason = _reason(source, target)
            if reason:
                violations.append(Violation(str(path.relative_to(root)), line, source, target, reason))
    return violations


def test_every_import_points_down() -> None:
    violations = find_upward_imports(REPO_ROOT)
    assert not violations, "imports that break the house plan:\n" + "\n".join(map(str, violations))


ALLOWED_SKELETON = {
    "core/__init__.py": "",
    "core/config.py": "",
    "core/data/__init__.py": "from core import config\n",
    "core/training/__init__.py": "",
    "core/cli/__init__.py": "",
    "core/cli/common.py": "from core.data import config\n",
    "core/cli/catalogue.py": "from jobs.kinds import CommandOutcome\n",
    "core/__main__.py": "from core.cli import common\n",
    "models/__init__.py": "import torch\n",
    "jobs/__init__.py": "",
    "jobs/kinds.py": "import huey\nfrom core.config import Settings\n",
    "jobs/records.py": "from . import kinds\n",
    "journeys/__init__.py": "",
    "journeys/stages.py": "def f():\n    from jobs.records import JobStore\n",
    "gradio_app/__init__.py": "",
    "gradio_app/runner.py": "from jobs.records import FINAL_STATUSES\n",
    "gradio_app/tabs/__init__.py": "import gradio as gr\nfrom gradio_app.runner import JobRunner\n",
    "app.py": "from core.cli.catalogue import cli_catalogue\nfrom gradio_app.runner import JobRunner\n",
}


def write_tree(root: Path, files: dict[str, str]) -> None:
    """Write each `relative path: text` of `files` under `root`, making the folders."""
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_the_checker_names_every_upward_import_it_is_shown(tmp_path: Path) -> None:
    write_tree(tmp_path, ALLOWED_SKELETON)
    assert find_upward_imports(tmp_path) == []

    planted = {
        "core/planted_cli.py": "def f():\n    from core.cli.common import render_table\n",
        "core/planted_jobs.py": "import importlib\n\nimportlib.import_module('jobs.runner')\n",
        "models/planted_core.py": "from core import config\n",
        "jobs/planted_journey.py": "x = 1\nfrom journeys import stages\n",
        "journeys/planted_cli.py": "from core.cli import catalogue\n",
        "gradio_app/tabs/planted_jobs.py": "from jobs.records import FINAL_STATUSES\n",
        "core/training/planted_gradio.py": "import gradio as gr\n",
        "core/data/planted_huey.py": "from huey import Huey\n",
        "core/cli/planted_dashboard.py": "from gradio_app.runner import JobRunner\n",
        "core/data/planted_relative.py": "from ..cli import common\n",
    }
    for rel, text in planted.items():
        (tmp_path / rel).write_text(text)
    violations = find_upward_imports(tmp_path)
    assert {(v.path, v.line, v.target) for v in violations} == {
        ("core/planted_cli.py", 2, "core.cli.common"),
        ("core/planted_jobs.py", 3, "jobs.runner"),
        ("models/planted_core.py", 1, "core.config"),
        ("jobs/planted_journey.py", 2, "journeys.stages"),
        ("journeys/planted_cli.py", 1, "core.cli.catalogue"),
        ("gradio_app/tabs/planted_jobs.py", 1, "jobs.records"),
        ("core/training/planted_gradio.py", 1, "gradio"),
        ("core/data/planted_huey.py", 1, "huey"),
        ("core/cli/planted_dashboard.py", 1, "gradio_app.runner"),
        ("core/data/planted_relative.py", 1, "core.cli.common"),
    }
    messages = {v.path: str(v) for v in violations}
    assert messages["core/planted_cli.py"] == (
        "core/planted_cli.py:2: core.planted_cli -> core.cli.common (core may not import core.cli: imports point down only)"
    )
    assert messages["gradio_app/tabs/planted_jobs.py"].endswith("(the dashboard reaches the runner only through gradio_app.runner)")
    assert messages["core/data/planted_huey.py"].endswith("(only jobs may import huey)")


# --- inside core: no import circle between its parts, and families import none of training/checks/eval

FAMILIES = "core.families"
ABOVE_FAMILIES = ("core.training", "core.checks", "core.eval")


def core_node(module: str) -> str | None:
    """Return the graph node of a module of the `core` library: `core.<sub-package or top-level module>`.

    None for anything else: other layers, the entry points `core.cli` and `core.__main__`, `core` itself.
    """
    parts = module.split(".")
    if unit_of(module) != "core" or len(parts) < 2:
        return None
    return ".".join(parts[:2])


def core_import_edges(root: Path) -> dict[tuple[str, str], list[str]]:
    """Return every edge between two core nodes under `root`, each with the `path:line` places that draw it."""
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sorted((root / "core").rglob("*.py")):
        source = core_node(module_name(root, path))
        if source is None:
            continue
        for line, target in imported_modules(root, path):
            node = core_node(target)
            place = f"{path.relative_to(root)}:{line}"
            if node is not None and node != source and place not in edges[(source, node)]:
                edges[(source, node)].append(place)
    return dict(edges)


def import_circles(edges: dict[tuple[str, str], list[str]]) -> list[str]:
    """Return one line per circle (strongly connected set of two or more nodes): its nodes and the edges
    inside it with the places that draw them; an empty list when the graph has no circle."""
    graph: dict[str, list[str]] = defaultdict(list)
    for source, target in sorted(edges):
        graph[source].append(target)
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[set[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        order[node] = low[node] = len(order)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in order:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], order[nxt])
        if low[node] == order[node]:
            component = set()
            while not component or node not in component:
                component.add(stack.pop())
            components.append(component)

    for node in sorted(graph):
        if node not in order:
            visit(node)
    circles = []
    for component in components:
        if len(component) > 1:
            inside = [f"{s} -> {t} ({', '.join(edges[(s, t)])})" for s, t in sorted(edges) if s in component and t in component]
            circles.append(" <-> ".join(sorted(component)) + ": " + "; ".join(inside))
    return sorted(circles)


def family_imports_above(edges: dict[tuple[str, str], list[str]]) -> list[str]:
    """Return one line per edge from `core.families` to `core.training`, `core.checks` or `core.eval`."""
    return [f"{s} -> {t} ({', '.join(places)})" for (s, t), places in sorted(edges.items())
            if s == FAMILIES and t in ABOVE_FAMILIES]


def test_core_parts_import_in_no_circle() -> None:
    circles = import_circles(core_import_edges(REPO_ROOT))
    assert not circles, "import circles inside core:\n" + "\n".join(circles)


def test_families_import_no_training_checks_or_eval() -> None:
    found = family_imports_above(core_import_edges(REPO_ROOT))
    assert not found, "core.families imports a part above it:\n" + "\n".join(found)


def module_import_edges(root: Path, package: str) -> dict[tuple[str, str], list[str]]:
    """Return every edge between two modules of `package` under `root` (the package itself, its
    `__init__`, is a node too), each with the `path:line` places that draw it."""
    folder = root.joinpath(*package.split("."))
    inside = lambda name: name == package or name.startswith(package + ".")  # noqa: E731
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sorted(folder.rglob("*.py")):
        source = module_name(root, path)
        for line, target in imported_modules(root, path):
            if inside(target) and target != source:
                edges[(source, target)].append(f"{path.relative_to(root)}:{line}")
    return dict(edges)


def test_family_modules_import_in_no_circle() -> None:
    circles = import_circles(module_import_edges(REPO_ROOT, FAMILIES))
    assert not circles, "import circles inside core.families:\n" + "\n".join(circles)


def test_the_module_checker_names_a_planted_family_circle(tmp_path: Path) -> None:
    write_tree(tmp_path, {
        "core/__init__.py": "",
        "core/families/__init__.py": "",
        "core/families/fam_model.py": "from core.families import Family\n",
        "core/families/fam.py": "from core.families.fam_model import CONFIG\n",
    })
    assert import_circles(module_import_edges(tmp_path, FAMILIES)) == []
    (tmp_path / "core/families/fam_model.py").write_text("def f():\n    from core.families.fam import FamFamily\n")
    assert import_circles(module_import_edges(tmp_path, FAMILIES)) == [
        "core.families.fam <-> core.families.fam_model: core.families.fam -> core.families.fam_model "
        "(core/families/fam.py:1); core.families.fam_model -> core.families.fam (core/families/fam_model.py:2)"
    ]


CORE_SKELETON = {
    "core/__init__.py": "",
    "core/errors.py": "",
    "core/checkpoint.py": "from core.errors import InputError\n",
    "core/families/__init__.py": "from core import checkpoint\n",
    "core/families/base.py": "from .. import errors\n",
    "core/training/__init__.py": "",
    "core/training/trainer.py": "from core.families import base\nfrom core.checks import doctor\n",
    "core/checks/__init__.py": "",
    "core/checks/doctor.py": "from core.families.base import x\n",
    "core/eval/__init__.py": "def f():\n    from core.checkpoint import load\n",
    "core/cli/__init__.py": "from core.training import trainer\nfrom core.eval import f\n",
    "core/__main__.py": "from core.cli import main\n",
}


def test_the_core_checker_names_every_planted_circle_and_family_import(tmp_path: Path) -> None:
    write_tree(tmp_path, CORE_SKELETON)
    clean = core_import_edges(tmp_path)
    assert ("core.training", "core.families") in clean and ("core.eval", "core.checkpoint") in clean
    assert import_circles(clean) == [] and family_imports_above(clean) == []

    planted = {
        "core/families/planted_training.py": "def f():\n    from core.training.trainer import Trainer\n",  # families -> training
        "core/checkpoint.py": "from core.errors import InputError\nimport importlib\nimportlib.import_module('core.eval')\n",
        "core/families/planted_checks.py": "from ..checks import doctor\n",  # relative; also a circle with checks
    }
    write_tree(tmp_path, planted)
    edges = core_import_edges(tmp_path)
    assert family_imports_above(edges) == [
        "core.families -> core.checks (core/families/planted_checks.py:1)",
        "core.families -> core.training (core/families/planted_training.py:2)",
    ]
    assert import_circles(edges) == [
        "core.checkpoint <-> core.eval: core.checkpoint -> core.eval (core/checkpoint.py:3); "
        "core.eval -> core.checkpoint (core/eval/__init__.py:2)",
        "core.checks <-> core.families <-> core.training: core.checks -> core.families (core/checks/doctor.py:1); "
        "core.families -> core.checks (core/families/planted_checks.py:1); "
        "core.families -> core.training (core/families/planted_training.py:2); "
        "core.training -> core.checks (core/training/trainer.py:2); "
        "core.training -> core.families (core/training/trainer.py:1)",
    ]

    (tmp_path / "core/families/planted_training.py").unlink()
    (tmp_path / "core/families/planted_checks.py").unlink()
    (tmp_path / "core/checkpoint.py").write_text(CORE_SKELETON["core/checkpoint.py"])
    assert import_circles(core_import_edges(tmp_path)) == []
    write_tree(tmp_path, {  # a top-level module is a node too
        "core/data/__init__.py": "",
        "core/data/cache.py": "from core.runs import RunFolder\n",
        "core/runs.py": "from core.errors import InputError\nfrom core.data import cache\n",
    })
    assert import_circles(core_import_edges(tmp_path)) == [
        "core.data <-> core.runs: core.data -> core.runs (core/data/cache.py:1); core.runs -> core.data (core/runs.py:2)"
    ]

"""mkdocs hooks (named in mkdocs.yml): the pages made from the code at every build, never kept by hand.

- `cli.md`: every command's `--help`, from the real parsers (`scripts/cli_reference.py`);
- `reference/<package>.md`: the library reference, one page per package of `LIBRARY`, with a `::: module`
  block for each of the package's own modules found on disk (mkdocstrings renders their docstrings);
  a sub-package without a page of its own is rendered inside its parent's page.

Nothing is fetched: the parsers are imported from this checkout, the docstrings read from its files.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

REPO_ROOT = Path(__file__).resolve().parent.parent
# package → what it is, one page each (the nav in mkdocs.yml lists these pages)
LIBRARY = {
    "core": "The foundation: errors, settings, the path rule, run folders, progress, checkpoints, audio, text.",
    "core.tokenizers": "Tokenizers: training, extension, merge, inspect and sweep, corpora, the vocabulary contract.",
    "core.speech": "The embedded k-means log-mel codec.",
    "core.data": "Datasets: manifests, importers, filters, splits, pairs, the feature-cache engine.",
    "core.families": "Model families: LinguaForge's own GPT, Chatterbox T3, IndexTTS2's GPT.",
    "core.training": "The run config, the plan, the trainer, adapters, replay, pruning.",
    "core.eval": "Evaluation: distances, the PocketSphinx judge, the quality judge, `eval tts`.",
    "core.checks": "The doctor and its checks.",
    "core.serve": "The speech server.",
    "models": "Torch modules: the GPT backbone, the TTS and LM models, the text-row split.",
    "jobs": "The job runner: queue, records, states, worker, recovery.",
    "journeys": "The quickstart journeys and their reports.",
}


def _modules(package: str) -> list[str]:
    """Return the dotted names of `package`'s own modules, then of its sub-packages without a page of their own."""
    folder = REPO_ROOT.joinpath(*package.split("."))
    modules = [f"{package}.{path.stem}" for path in sorted(folder.glob("*.py")) if path.stem != "__init__"]
    nested = [f"{package}.{path.parent.name}" for path in sorted(folder.glob("*/__init__.py"))
              if f"{package}.{path.parent.name}" not in LIBRARY]
    return modules + nested


def library_page(package: str) -> str:
    """Return the Markdown of `package`'s reference page: its docstring, then each module's."""
    blocks = [f"# `{package}`", "", LIBRARY[package], "", f"::: {package}",
              "    options:", "      show_root_heading: false", "      members: false", ""]
    for module in _modules(package):
        blocks += [f"::: {module}", ""]
    return "\n".join(blocks)


def cli_page() -> str:
    """Return the CLI reference page, rendered from the parsers."""
    sys.path.insert(0, str(REPO_ROOT / "scripts"))
    try:
        from cli_reference import render
    finally:
        sys.path.pop(0)
    return render()


def on_files(files: Files, config: Any) -> Files:
    """Add the generated pages to the site's files (mkdocs calls this before it builds the nav)."""
    files.append(File.generated(config, "cli.md", content=cli_page()))
    for package in LIBRARY:
        files.append(File.generated(config, f"reference/{package}.md", content=library_page(package)))
    return files

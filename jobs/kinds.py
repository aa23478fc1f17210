"""What the runner knows about the commands it runs: the job catalogue it is handed, and GPU kinds.

A job kind is a dotted CLI command (`tokenizer.train`, `train`); its parameters are the command's
long option names. The runner never imports the command line: an entry point builds a
`JobCatalogue` from the CLI's own parsers (`core.cli.catalogue.cli_catalogue()`) and hands it to
`JobRunner` and the journeys at start-up, so a job is validated exactly like the CLI,
with the same messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Sequence

from core.paths import PathType

GPU_KINDS = (
    "train",
    "validate",
    "synthesize",
    "generate",
    "eval.tts",
    "codec.train",
    "prune",
)  # quickstart.* are not GPU kinds: every stage that touches a model is a job of its own, which takes the slot


@dataclass(frozen=True)
class CommandOutcome:
    """A command run in this process: its exit code, its `--json` data and its text for people."""

    exit_code: int
    data: dict[str, Any] = field(default_factory=dict)
    text: str = ""


class JobCatalogue(Protocol):
    """The commands jobs can run: kind → validated argv, and running one command in this process."""

    def kinds(self) -> list[str]:
        """Return every kind a job can have, dotted and sorted."""
        ...

    def accepts(self, kind: str, name: str) -> bool:
        """Return True when the command of `kind` has a parameter `name`; raise InputError for an unknown kind."""
        ...

    def build_argv(self, kind: str, params: dict[str, Any]) -> list[str]:
        """Return the checked argv (with `--json`) running `kind` with `params`; raise InputError when it is wrong."""
        ...

    def path_options(self, kind: str) -> dict[str, PathType]:
        """Return the kind's path parameters (the options typed as paths), each with its PathType."""
        ...

    def absolute_paths(self, kind: str, params: dict[str, Any], workspace: Path) -> dict[str, Any]:
        """Return `params` with every path parameter absolute (relative ones against `workspace`)."""
        ...

    def run(self, argv: Sequence[str]) -> CommandOutcome:
        """Run one command in this process and return its outcome; bad input becomes its exit code."""
        ...


def is_gpu_kind(kind: str, gpu_kinds: list[str] | None = None) -> bool:
    """Return True when jobs of `kind` take a GPU slot: it is in `gpu_kinds` (default GPU_KINDS)."""
    return kind in (GPU_KINDS if gpu_kinds is None else gpu_kinds)

"""The job catalogue built from the CLI's own parsers: kind → checked argv, and in-process runs.

Entry points (`python -m core jobs|worker|quickstart`, `app.py`) build it with `cli_catalogue()`
and hand it to the job runner and the journeys, which never import the command line themselves.
`build_argv("tokenizer.train", {"vocab_size": 8000, "corpus": ["a.txt", "b.txt"]})` turns CLI-named
parameters into the command's argv and checks it with the real parser, so a job is validated
exactly like the CLI and with the same messages. New commands need no edits here.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
from pathlib import Path
from typing import Any, Sequence

from core.cli import build_parser
from core.cli._guards import check_arguments
from core.errors import InputError, LinguaForgeError
from core.paths import PathType, absolute_path_params, path_options
from jobs.kinds import CommandOutcome

NOT_JOBS = ("jobs", "worker")
SKIPPED_DESTS = ("help", "json", "handler")
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off", "")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _option_actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.dest: a for a in parser._actions if a.dest not in SKIPPED_DESTS and a.dest != argparse.SUPPRESS}


def _flag_value(kind: str, name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in TRUE_WORDS:
        return True
    if text in FALSE_WORDS:
        return False
    raise InputError(f"{kind}: parameter {name!r} is a switch; give true or false, not {value!r}.")


def _values(value: Any) -> list[str]:
    items = value if isinstance(value, (list, tuple)) else [value]
    return [str(item) for item in items]


def _option_words(kind: str, action: argparse.Action, value: Any) -> list[str]:
    longs = [s for s in action.option_strings if s.startswith("--")]
    flag = max(longs or action.option_strings, key=len)
    if action.nargs == 0:
        return [flag] if _flag_value(kind, action.dest, value) else []
    if value is None:
        return []
    values = _values(value)
    if isinstance(action, argparse._AppendAction):
        return [word for item in values for word in (flag, item)]
    if action.nargs in ("+", "*") or isinstance(action.nargs, int):
        return [flag, *values]
    joined = ",".join(values)
    return [f"{flag}={joined}"] if joined.startswith("-") else [flag, joined]  # `--shard -1/2` would read as two options


def _parse_checked(top: argparse.ArgumentParser, argv: list[str], kind: str) -> argparse.Namespace:
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            return top.parse_args(argv)
    except SystemExit as exc:
        lines = [line for line in stderr.getvalue().splitlines() if "error:" in line]
        message = lines[-1].split("error:", 1)[1].strip() if lines else f"invalid parameters (exit {exc.code})"
        raise InputError(f"{kind}: {message}. Run `python -m core {kind.replace('.', ' ')} --help`.") from None


class CliCatalogue:
    """The `python -m core` commands as job kinds (a `jobs.kinds.JobCatalogue`).

    The parsers are built once per catalogue (parsing does not change them), so checking a job costs
    no parser construction.
    """

    @functools.cached_property
    def _top(self) -> argparse.ArgumentParser:
        return build_parser()

    def kinds(self) -> list[str]:
        """Return every CLI command that can run as a job, dotted (`tokenizer.train`, `train`)."""
        kinds = []
        for name, sub in _subparsers(self._top).items():
            if name in NOT_JOBS:
                continue
            commands = _subparsers(sub)
            if commands:
                kinds.extend(f"{name}.{command}" for command in commands)
            else:
                kinds.append(name)
        return sorted(kinds)

    def command_parser(self, kind: str) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser, list[str]]:
        """Return (top-level parser, the kind's own parser, the argv words naming the command).

        Raises InputError naming the available kinds when `kind` is not a CLI command.
        """
        top = self._top
        words = kind.split(".")
        parser: argparse.ArgumentParser | None = top
        for word in words:
            parser = _subparsers(parser).get(word) if parser is not None else None
            if parser is None:
                break
        if words[0] in NOT_JOBS or parser is None or _subparsers(parser):
            raise InputError(
                f"unknown job kind {kind!r}. Available kinds: {', '.join(self.kinds()) or 'none'}."
            )
        return top, parser, words

    def accepts(self, kind: str, name: str) -> bool:
        """Return True when the command of `kind` has a parameter (option or positional) `name`.

        Raises InputError when `kind` is not a CLI command.
        """
        _, parser, _ = self.command_parser(kind)
        return name in _option_actions(parser)

    def build_argv(self, kind: str, params: dict[str, Any]) -> list[str]:
        """Return the CLI argv (without `python -m core`, with `--json`) that runs `kind` with `params`.

        Raises InputError for an unknown kind, an unknown parameter, or anything the command's
        own parser rejects (with argparse's message).
        """
        top, parser, words = self.command_parser(kind)
        actions = _option_actions(parser)
        unknown = sorted(set(params) - set(actions))
        if unknown:
            raise InputError(
                f"{kind}: unknown parameter(s) {', '.join(unknown)}. "
                f"Known: {', '.join(sorted(actions)) or 'none'}."
            )
        positionals: list[str] = []
        options: list[str] = []
        for dest, action in actions.items():
            if dest not in params:
                continue
            if action.option_strings:
                options.extend(_option_words(kind, action, params[dest]))
            else:
                positionals.extend(_values(params[dest]))
        argv = [*words, *positionals, *options, "--json"]
        _parse_checked(top, argv, kind)
        return argv

    def path_options(self, kind: str) -> dict[str, PathType]:
        """Return the command's path parameters: the options whose argparse type is a `core.paths.PathType`.

        Raises InputError when `kind` is not a CLI command.
        """
        _, parser, _ = self.command_parser(kind)
        return path_options(parser._actions)

    def absolute_paths(self, kind: str, params: dict[str, Any], workspace: Path) -> dict[str, Any]:
        """Return `params` with the command's path parameters absolute, relative ones resolved against `workspace`.

        Path parameters are the options whose type is a `core.paths.PathType`; keywords (`auto`) pass.
        Raises InputError when `kind` is not a CLI command.
        """
        _, parser, _ = self.command_parser(kind)
        return absolute_path_params(parser._actions, params, workspace)

    def run(self, argv: Sequence[str]) -> CommandOutcome:
        """Run one command (argv as `build_argv` returns it) in this process; return its outcome.

        A LinguaForgeError becomes its exit code with `error: …` as the text and
        `{"ok": False, "error": …}` (plus its `detail`, when it has one) as the data, as the
        command's `--json` prints it; other exceptions propagate (they are bugs).
        """
        args = self._top.parse_args(list(argv))
        try:
            check_arguments(args)  # as `python -m core` does before every handler
            result = args.handler(args)
        except LinguaForgeError as exc:
            data = {"ok": False, "error": str(exc), **({"detail": exc.detail} if exc.detail else {})}
            return CommandOutcome(exc.exit_code, data, f"error: {exc}")
        return CommandOutcome(result.exit_code, result.data, result.text)


def cli_catalogue() -> CliCatalogue:
    """Return the catalogue of `python -m core` commands that entry points hand to the runner."""
    return CliCatalogue()

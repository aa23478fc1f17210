"""Job kinds are dotted CLI commands; parameters are the command's long option names.

`build_argv(kind, params)` turns `{"vocab_size": 8000, "corpus": ["a.txt", "b.txt"]}` into the
command's argv and checks it with the real parser from `core.cli.build_parser()`, so a job is
validated exactly like the CLI and with the same messages. New commands need no edits here.
"""

from __future__ import annotations

import argparse
import contextlib
import io
from typing import Any

from core.errors import InputError

NOT_JOBS = ("jobs", "worker")
GPU_KINDS = (
    "train",
    "synthesize",
    "generate",
    "eval.tts",
    "codec.train",
    "prune",
)  # quickstart.* are not GPU kinds: they only submit and wait for their stage jobs, which take the slots
SKIPPED_DESTS = ("help", "json", "handler")
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off", "")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def available_kinds() -> list[str]:
    """Return every CLI command that can run as a job, dotted (`tokenizer.train`, `train`)."""
    from core.cli import build_parser

    kinds = []
    for name, sub in _subparsers(build_parser()).items():
        if name in NOT_JOBS:
            continue
        commands = _subparsers(sub)
        if commands:
            kinds.extend(f"{name}.{command}" for command in commands)
        else:
            kinds.append(name)
    return sorted(kinds)


def command_parser(kind: str) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser, list[str]]:
    """Return (top-level parser, the kind's own parser, the argv words naming the command).

    Raises InputError naming the available kinds when `kind` is not a CLI command.
    """
    from core.cli import build_parser

    top = build_parser()
    words = kind.split(".")
    parser = top
    for word in words:
        parser = _subparsers(parser).get(word) if parser is not None else None
        if parser is None:
            break
    if words[0] in NOT_JOBS or parser is None or _subparsers(parser):
        raise InputError(
            f"unknown job kind {kind!r}. Available kinds: {', '.join(available_kinds()) or 'none'}."
        )
    return top, parser, words


def is_gpu_kind(kind: str, gpu_kinds: list[str] | None = None) -> bool:
    """Return True when jobs of `kind` take a GPU slot: it is in `gpu_kinds` (default GPU_KINDS)."""
    return kind in (GPU_KINDS if gpu_kinds is None else gpu_kinds)


def _option_actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.dest: a for a in parser._actions if a.dest not in SKIPPED_DESTS and a.dest != argparse.SUPPRESS}


def accepts(kind: str, name: str) -> bool:
    """Return True when the command of `kind` has a parameter (option or positional) `name`."""
    _, parser, _ = command_parser(kind)
    return name in _option_actions(parser)


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
    return [flag, ",".join(values)]


def _parse_checked(top: argparse.ArgumentParser, argv: list[str], kind: str) -> argparse.Namespace:
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            return top.parse_args(argv)
    except SystemExit as exc:
        lines = [line for line in stderr.getvalue().splitlines() if "error:" in line]
        message = lines[-1].split("error:", 1)[1].strip() if lines else f"invalid parameters (exit {exc.code})"
        raise InputError(f"{kind}: {message}. Run `python -m core {kind.replace('.', ' ')} --help`.") from None


def build_argv(kind: str, params: dict[str, Any]) -> list[str]:
    """Return the CLI argv (without `python -m core`, with `--json`) that runs `kind` with `params`.

    Raises InputError for an unknown kind, an unknown parameter, or anything the command's
    own parser rejects (with argparse's message).
    """
    top, parser, words = command_parser(kind)
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

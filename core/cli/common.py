"""Helpers every CLI group uses: the Result type, command registration and option parsing.

Tables and key/value lists render with `core.tables` (the doctor shares it)."""

from __future__ import annotations

import argparse
import inspect
import math
from dataclasses import dataclass, field
from typing import Any, Callable, NoReturn

from core.numbers import SEED, NumberRange


@dataclass
class Result:
    """What a command produced: `data` for `--json`, `text` for people, and its exit code."""

    data: dict[str, Any] = field(default_factory=dict)
    text: str = ""
    exit_code: int = 0


Handler = Callable[[argparse.Namespace], Result]


class CliParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line: what is wrong with which value, and where help is."""

    def error(self, message: str) -> NoReturn:
        """Print `error: MESSAGE (see `PROG --help`)` on stderr and exit 2."""
        self.exit(2, f"error: {message} (see `{self.prog} --help`)\n")


def number_type(spec: NumberRange) -> Callable[[str], int | float]:
    """Return an argparse type for the numbers of `spec` (`core.numbers`): finite, in its range, whole when it says so.

    Its errors name the value and the range; the job catalogue and the dashboard get the same ones.
    """

    def parse(value: str) -> int | float:
        number, problem = spec.problem(value)
        if problem is not None:
            raise argparse.ArgumentTypeError(problem)
        return number if spec.integer else float(number)  # type: ignore[arg-type]

    parse.__name__ = spec.span()
    return parse


def int_in(low: int, high: int) -> Callable[[str], int]:
    """Return an argparse type accepting whole numbers from `low` to `high` (a count a request may set is bounded)."""
    return number_type(NumberRange(low, high, integer=True))  # type: ignore[return-value]


def float_in(low: float, high: float, low_open: bool = False, high_open: bool = False) -> Callable[[str], float]:
    """Return an argparse type accepting finite numbers within [low, high] (ends open when asked)."""
    return number_type(NumberRange(low, high, low_open=low_open, high_open=high_open))  # type: ignore[return-value]


SEED_ARG = number_type(SEED)


SIZE_UNITS = {"b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4, "k": 1000, "m": 1000**2, "g": 1000**3,
              "t": 1000**4, "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4}


MAX_MEMORY_BYTES = 1024**5  # 1 PiB: far above any device, far below what overflows a plan's arithmetic
MEMORY_SIZE_HELP = "at most 1PiB"  # the bound as --help states it


def memory_size(value: str) -> int:
    """Parse a memory size such as `24GiB`, `80GB`, `24576MiB` or `1.5TiB` into bytes (GB = 10⁹, GiB = 2³⁰),
    at most MAX_MEMORY_BYTES."""
    text = value.strip().lower().replace(" ", "")
    number = text.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = text[len(number):]
    try:
        amount = float(number)
    except ValueError:
        amount = math.nan
    if unit not in SIZE_UNITS or not math.isfinite(amount) or amount <= 0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a memory size; give a number and a unit such as 24GiB, 80GB or 24576MiB")
    size = amount * SIZE_UNITS[unit]
    if not 1 <= size <= MAX_MEMORY_BYTES:
        raise argparse.ArgumentTypeError(f"{value!r}: give a memory size above 0, {MEMORY_SIZE_HELP} "
                                         "(24GiB, 80GB, 24576MiB)")
    return int(size)


def add_command(
    subparsers: argparse._SubParsersAction,
    name: str,
    handler: Handler,
    help: str | None = None,
    description: str | None = None,
) -> argparse.ArgumentParser:
    """Add a command that runs `handler`, with the shared `--json` flag; return its parser.

    Without `help`, the handler's docstring is the command's text: its first line (lower-cased
    initial, no full stop) the one-line help, the whole docstring the `--help` description.
    """
    if help is None:
        doc = inspect.getdoc(handler) or ""
        first = doc.split("\n", 1)[0].rstrip(".")
        help = first[:1].lower() + first[1:]
        description = description or doc
    parser = subparsers.add_parser(
        name,
        help=help,
        description=description or help,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.set_defaults(handler=handler)
    return parser


def add_force_option(parser: argparse.ArgumentParser, what: str = "the output file") -> None:
    """Add `--force`: without it, the command refuses (before any work) to replace an existing file it writes."""
    parser.add_argument("--force", action="store_true", help=f"replace {what} when it exists (default: refuse)")


def options_of(args: argparse.Namespace, *names: str) -> dict[str, Any]:
    """Return `{name: args.name}` for the given option names, to pass on as keyword arguments."""
    return {name: getattr(args, name) for name in names}


def add_group(subparsers: argparse._SubParsersAction, name: str, help: str) -> argparse._SubParsersAction:
    """Add a command group such as `tokenizer` and return the subparsers for its commands."""
    parser = subparsers.add_parser(name, help=help, description=help)
    return parser.add_subparsers(dest="command", metavar="COMMAND", required=True)


def csv_list(value: str) -> list[str]:
    """Parse a comma-separated option value into a list of non-empty, stripped items."""
    return [item.strip() for item in value.split(",") if item.strip()]


def name_arg(what: str) -> Callable[[str], str]:
    """Return an argparse type for a value that becomes part of a file or folder name (a run or export name, a
    language code): one name by the one name rule (`core.confine.check_name`), whatever option carries it."""
    from core.confine import check_name
    from core.errors import InputError

    def parse(value: str) -> str:
        try:
            return check_name(value, what)
        except InputError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = "name"
    return parse


def name_list(what: str) -> Callable[[str], list[str]]:
    """Return an argparse type for a comma-separated list of names (`en,am`), each checked as `name_arg` does."""
    one = name_arg(what)

    def parse(value: str) -> list[str]:
        return [one(item) for item in csv_list(value)]

    parse.__name__ = "list of names"
    return parse


LANGUAGE_ARG = name_arg("language code")


def int_list(low: int, high: int, most: int) -> Callable[[str], list[int]]:
    """Return an argparse type for a comma-separated list of at most `most` whole numbers from `low` to `high`
    such as `1000,2000,4000`; its errors name the bad item."""
    spec = NumberRange(low, high, integer=True)

    def parse(value: str) -> list[int]:
        items = csv_list(value)
        if not items or len(items) > most:
            raise argparse.ArgumentTypeError(f"give 1 to {most} comma-separated whole numbers, not {len(items)}")
        numbers = []
        for item in items:
            number, problem = spec.problem(item)
            if problem is not None:
                raise argparse.ArgumentTypeError(problem)
            numbers.append(int(number))  # type: ignore[arg-type]
        return numbers

    parse.__name__ = f"list of {spec.span()}s"
    return parse


def device_arg(value: str) -> str:
    """Parse a torch device name (`cpu`, `cuda`, `cuda:N`); refuse CUDA when this machine has no such GPU."""
    import torch

    text = value.strip().lower()
    if text == "cpu":
        return text
    if text == "cuda" or text.startswith("cuda:"):
        index = text.partition(":")[2]
        if index and not index.isdigit():
            raise argparse.ArgumentTypeError(f"{value!r} is not a device; use cpu, cuda or cuda:N")
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise argparse.ArgumentTypeError(f"{value}: no CUDA GPU is available here; use --device cpu")
        if index and int(index) >= count:
            raise argparse.ArgumentTypeError(f"{value}: this machine has {count} GPU(s) (cuda:0…cuda:{count - 1})")
        return text
    raise argparse.ArgumentTypeError(f"{value!r} is not a device; use cpu, cuda or cuda:N")

"""Helpers every CLI group uses: the Result type, command registration and option parsing.

Tables and key/value lists render with `core.tables` (the doctor shares it)."""

from __future__ import annotations

import argparse
import inspect
import math
from dataclasses import dataclass, field
from typing import Any, Callable, NoReturn


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


def int_at_least(low: int) -> Callable[[str], int]:
    """Return an argparse type accepting integers ≥ `low`; its errors name the value and the bound."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not an integer; give a whole number ≥ {low}") from None
        if number < low:
            raise argparse.ArgumentTypeError(f"{number} is too small; give a whole number ≥ {low}")
        return number

    parse.__name__ = f"integer ≥ {low}"
    return parse


def float_in(low: float, high: float | None = None, low_open: bool = False, high_open: bool = False) -> Callable[[str], float]:
    """Return an argparse type accepting finite numbers within [low, high] (ends open when asked)."""
    span = f"{'(' if low_open else '['}{low:g}, {'∞' if high is None else f'{high:g}'}{')' if high_open or high is None else ']'}"

    def parse(value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a number; give one in {span}") from None
        too_low = number <= low if low_open else number < low
        too_high = high is not None and (number >= high if high_open else number > high)
        if math.isnan(number) or math.isinf(number) or too_low or too_high:
            raise argparse.ArgumentTypeError(f"{value} is out of range; give a number in {span}")
        return number

    parse.__name__ = f"number in {span}"
    return parse


SIZE_UNITS = {"b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4, "k": 1000, "m": 1000**2, "g": 1000**3,
              "t": 1000**4, "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4}


def memory_size(value: str) -> int:
    """Parse a memory size such as `24GiB`, `80GB`, `24576MiB` or `1.5TiB` into bytes (GB = 10⁹, GiB = 2³⁰)."""
    text = value.strip().lower().replace(" ", "")
    number = text.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = text[len(number):]
    try:
        amount = float(number)
    except ValueError:
        amount = math.nan
    if unit not in SIZE_UNITS or not math.isfinite(amount) or amount <= 0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a memory size; give a number and a unit such as 24GiB, 80GB or 24576MiB")
    return int(amount * SIZE_UNITS[unit])


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


def int_list(value: str) -> list[int]:
    """Parse a comma-separated list of integers such as `1000,2000,4000`.

    Raises argparse.ArgumentTypeError naming the bad item.
    """
    items = []
    for item in csv_list(value):
        try:
            items.append(int(item))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{item!r} is not an integer") from exc
        if items[-1] < 1:
            raise argparse.ArgumentTypeError(f"{item} is too small; every size must be ≥ 1")
    return items


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

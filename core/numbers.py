"""The one number type of options: a range that is finite, bounded on both sides, and integral where it must be.

Every numeric option is a `NumberRange`: the CLI's argparse types (`core.cli.common.int_in`, `float_in`) are
built on it, so the job catalogue (which checks a job with the CLI's parsers) and the dashboard (which submits
jobs) share its ranges and messages; a family's speaker options (`synthesize --option KEY=NUMBER`,
`eval.synthesis` of a run config) name theirs in `ModelFamily.speech_options`.

    NumberRange(1, 10_000, integer=True).check("24", "--per-language")      # 24
    NumberRange(0.0, 1.0, low_open=True).check(float("nan"), "top_p")       # InputError: not a finite number

NaN and infinity are never numbers here; an integral range takes `3` and `3.0`, never `3.5` or `True`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from core.confine import shown
from core.errors import InputError

#: the largest seed every generator takes (numpy's legacy seeding stops at 2**32 - 1)
SEED_MAX = 2**32 - 1
# caps no request may pass: a count or size a request can set is bounded, so none asks for unbounded work
MAX_TEMPERATURE = 100.0
MAX_NEW_TOKENS = 100_000
MAX_SPEECH_SECONDS = 3600.0
MAX_CLIP_SECONDS = 3600.0
MAX_VOCAB = 10_000_000
MAX_STEPS = 1_000_000_000
MAX_WORKERS = 256


@dataclass(frozen=True)
class NumberRange:
    """Numbers from `low` to `high` (ends included unless open), whole numbers only with `integer`."""

    low: float
    high: float
    integer: bool = False
    low_open: bool = False
    high_open: bool = False
    words: str | None = None  # the range for people when its bounds are only a guard (`a whole number`)

    def span(self) -> str:
        """Return the range for people: `a whole number from 1 to 10000` or `a number in (0, 1]`."""
        if self.words:
            return self.words
        if self.integer:
            return f"a whole number from {int(self.low)} to {int(self.high)}"
        return f"a number in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}{')' if self.high_open else ']'}"

    def problem(self, value: object) -> tuple[int | float | None, str | None]:
        """Return (the number, None) when `value` (a number or its text) lies in the range, else (None, why not)."""
        number = _number(value)
        if number is None or (isinstance(number, float) and not math.isfinite(number)):
            return None, f"{_shown(value)} is not a finite number; give {self.span()}"
        if self.integer:
            if isinstance(number, float) and not number.is_integer():
                return None, f"{_shown(value)} is not a whole number; give {self.span()}"
            number = int(number)
        below = number < self.low or (self.low_open and number == self.low)
        above = number > self.high or (self.high_open and number == self.high)
        if self.integer and (below or above):
            return None, f"{_shown(value)} is too {'small' if below else 'large'}; give {self.span()}"
        if below or above:
            return None, f"{_shown(value)} is out of range; give {self.span()}"
        return number, None

    def check(self, value: object, what: str) -> int | float:
        """Return `value` as an int (integral range) or a float when it lies in the range.

        Raises InputError naming `what`, the value and the range otherwise.
        """
        number, problem = self.problem(value)
        if problem is not None:
            raise InputError(f"{what}: {problem}.")
        return number if self.integer else float(number)  # type: ignore[arg-type]


def _number(value: object) -> int | float | None:
    """Return `value` as an int or float (text parsed; a whole-number text stays exact), or None when it is none."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        text = value.strip()
        if len(text) > 100:
            return None
        try:
            return int(text)
        except ValueError:
            pass
        try:
            return float(text)
        except ValueError:
            return None
    return None


def _shown(value: object) -> str:
    return shown(value.strip() if isinstance(value, str) and value.strip() else value, limit=40)


SEED = NumberRange(0, SEED_MAX, integer=True)
#: the longest speech one request or sentence may ask for, in seconds
SPEECH_SECONDS = NumberRange(0.0, MAX_SPEECH_SECONDS, low_open=True)

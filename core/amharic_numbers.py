"""Amharic number words: Arabic digits and Ge'ez numerals (፩…፼) read out, for `core.text.normalize_text`.

Readings follow the common cardinal system (languagesandnumbers.com, numbersdata.com "Numbers in
Amharic"): units, `አስራ` + unit for 11–19, tens words followed by the unit, `<n> መቶ` (100 is just
`መቶ`), `<n> ሺህ` (1,000 is just `ሺህ`), `<n> ሚሊዮን`, `<n> ቢሊዮን`; a decimal point is `ነጥብ` with the
digits after it read one by one. Ge'ez numerals have no zero: ፩–፱, ፲–፺, ፻ (×100 of the group
before it) and ፼ (×10,000 of everything before it), so ፻፼ is a million.
"""

from __future__ import annotations

import re

UNITS = ("ዜሮ", "አንድ", "ሁለት", "ሶስት", "አራት", "አምስት", "ስድስት", "ሰባት", "ስምንት", "ዘጠኝ")
TENS = {1: "አስር", 2: "ሃያ", 3: "ሰላሳ", 4: "አርባ", 5: "ኃምሳ", 6: "ስልሳ", 7: "ሰባ", 8: "ሰማንያ", 9: "ዘጠና"}
TEEN_PREFIX = "አስራ"
HUNDRED, THOUSAND, POINT = "መቶ", "ሺህ", "ነጥብ"
LARGE = ((10**9, "ቢሊዮን"), (10**6, "ሚሊዮን"))

GEEZ_DIGITS = {chr(0x1369 + i): i + 1 for i in range(9)}        # ፩..፱
GEEZ_TENS = {chr(0x1372 + i): (i + 1) * 10 for i in range(9)}   # ፲..፺
GEEZ_HUNDRED, GEEZ_TEN_THOUSAND = "\u137b", "\u137c"              # ፻ ፼
_GEEZ_RUN = re.compile(f"[{''.join(GEEZ_DIGITS)}{''.join(GEEZ_TENS)}{GEEZ_HUNDRED}{GEEZ_TEN_THOUSAND}]+")
_ARABIC_NUMBER = re.compile(r"(?<![\d.,])(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?(?![\d,]\d)")


def _below_thousand(n: int) -> list[str]:
    words: list[str] = []
    hundreds, rest = divmod(n, 100)
    if hundreds:
        words += ([] if hundreds == 1 else [UNITS[hundreds]]) + [HUNDRED]
    tens, unit = divmod(rest, 10)
    if tens == 1 and unit:
        words += [TEEN_PREFIX, UNITS[unit]]
    else:
        words += ([TENS[tens]] if tens else []) + ([UNITS[unit]] if unit else [])
    return words


def number_words(n: int) -> str:
    """Return the Amharic reading of the non-negative integer `n` (e.g. 1985 → `ሺህ ዘጠኝ መቶ ሰማንያ አምስት`).

    Raises ValueError for a negative number.
    """
    if n < 0:
        raise ValueError(f"number_words expects n >= 0, got {n}")
    if n == 0:
        return UNITS[0]
    words: list[str] = []
    for size, name in LARGE:
        count, n = divmod(n, size)
        if count:
            words += [number_words(count), name]
    thousands, n = divmod(n, 1000)
    if thousands:
        words += ([] if thousands == 1 else [number_words(thousands)]) + [THOUSAND]
    words += _below_thousand(n)
    return " ".join(words)


def geez_value(numeral: str) -> int:
    """Return the value of a run of Ge'ez numerals (`፲፱፻፹፭` → 1985, `፻፼` → 1,000,000).

    Raises ValueError for a character that is not a Ge'ez numeral.
    """
    total = group = current = 0
    for char in numeral:
        if char in GEEZ_DIGITS:
            current += GEEZ_DIGITS[char]
        elif char in GEEZ_TENS:
            current += GEEZ_TENS[char]
        elif char == GEEZ_HUNDRED:
            group += (current or 1) * 100
            current = 0
        elif char == GEEZ_TEN_THOUSAND:
            total = (total + group + current or 1) * 10_000
            group = current = 0
        else:
            raise ValueError(f"{char!r} is not a Ge'ez numeral")
    return total + group + current


def _arabic(match: re.Match[str]) -> str:
    whole = number_words(int(match.group(1).replace(",", "")))
    if match.group(2) is None:
        return whole
    return " ".join([whole, POINT, *(UNITS[int(d)] for d in match.group(2))])


def verbalize_numbers(text: str) -> str:
    """Return `text` with every Arabic-digit number (1,000 groups and a decimal point allowed) and every
    run of Ge'ez numerals replaced by its Amharic words, set off by spaces."""
    text = _GEEZ_RUN.sub(lambda m: f" {number_words(geez_value(m.group(0)))} ", text)
    return _ARABIC_NUMBER.sub(lambda m: f" {_arabic(m)} ", text)

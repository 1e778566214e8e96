"""Numbers in a request: money, parallelism and a runtime limit, each by its unit.

A number is money only with a money sign or word ("$50", "50 dollars", "50 usd",
"a budget of 50"); it is a runtime limit with a time unit ("under 10 minutes"),
and parallelism with a parallel word ("4 at a time", "max 4 in parallel"). A bare
number is left for the caller to report as not understood. Matching is on whole
words: the regexes never start or end inside a word.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NUM = r"(?P<n>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)(?P<k>k)?"
_WORDS = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "twelve": 12, "fifteen": 15, "sixteen": 16,
    "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "hundred": 100,
    "a hundred": 100, "one hundred": 100, "two hundred": 200, "five hundred": 500,
    "a thousand": 1000,
}
_WORD_NUM = r"(?P<w>" + "|".join(sorted(_WORDS, key=len, reverse=True)) + r")(?![a-z])"
_START = r"(?<![\w$.-])"
_END = r"(?![\w-])"
_UPTO = (
    r"(?:(?:under|below|less than|within|in|at most|max(?:imum)?|up to|no more than|"
    r"not more than|inside|limit(?: of)?|cap(?: of)?|for|than)\s+)?"
)
_SPEND = r"(?:spend(?:ing)?\s+(?:at most\s+|up to\s+|no more than\s+|under\s+|less than\s+)?)?"
_MONEY_PATTERNS = (
    rf"{_START}{_UPTO}(?:a\s+|the\s+)?(?:total\s+)?budget\s*(?:of|is|=|:|to|at)?\s*"
    rf"(?:(?:under|at most|up to|max)\s+)?(?:\$\s*)?{_NUM}\s*(?:dollars?|usd|bucks)?{_END}",
    rf"{_START}{_UPTO}{_SPEND}\$\s*{_NUM}{_END}",
    rf"{_START}{_UPTO}{_SPEND}usd\s*{_NUM}{_END}",
    rf"{_START}{_UPTO}{_SPEND}{_NUM}\s*(?:\$|dollars?|usd|bucks)(?![\w-])",
    rf"{_START}{_UPTO}{_SPEND}{_WORD_NUM}\s+(?:dollars?|usd|bucks){_END}",
)
_TIME = (
    rf"{_START}{_UPTO}(?:{_NUM}|{_WORD_NUM})\s*-?\s*(?P<u>seconds?|secs?|s|minutes?|mins?|m|"
    rf"hours?|hrs?|h){_END}"
)
_PARALLEL_PATTERNS = (
    rf"{_START}(?:(?:max(?:imum)?|at most|up to|no more than|only|with|limit(?: of)?)\s+)?"
    rf"(?:{_NUM}|{_WORD_NUM})\s*(?:x\s+)?(?:at a time|at once|in parallel|parallel(?:ism)?|"
    r"concurrent(?:ly)?|simultaneous(?:ly)?|workers?|slots?|(?:sandboxes|jobs|templates|"
    rf"containers) (?:at a time|at once|in parallel)){_END}",
    rf"{_START}(?:max(?:imum)?\s+)?(?:parallelism|concurrency|parallel)\s*(?:of|=|:|to|at)?\s*"
    rf"(?:{_NUM}|{_WORD_NUM}){_END}",
    rf"{_START}(?P<one>one at a time|one by one|sequential(?:ly)?|serially|in sequence|"
    rf"in series|no parallelism){_END}",
)
_AN_HOUR = (
    rf"{_START}{_UPTO}(?P<half>half an hour|an hour and a half|an hour|one hour|a day)"
    rf"{_END}"
)
_BARE = rf"{_START}\$?{_NUM}{_END}"
_UNITS = {"s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1, "m": 60, "min": 60,
          "mins": 60, "minute": 60, "minutes": 60, "h": 3600, "hr": 3600, "hrs": 3600,
          "hour": 3600, "hours": 3600}
MONEY = tuple(re.compile(p) for p in _MONEY_PATTERNS)
TIME = re.compile(_TIME)
AN_HOUR = re.compile(_AN_HOUR)
_SPOKEN_TIMES = {"half an hour": 1800, "an hour and a half": 5400, "an hour": 3600,
                 "one hour": 3600, "a day": 86400}
PARALLEL = tuple(re.compile(p) for p in _PARALLEL_PATTERNS)
BARE = re.compile(_BARE)


@dataclass(frozen=True)
class Quantity:
    """One number phrase: which field it sets, its value, and where it was."""

    field: str  # budget_usd | max_parallel | max_runtime_s | unknown
    value: float
    start: int
    end: int
    text: str


def _value(match: re.Match[str]) -> float:
    groups = match.groupdict()
    if groups.get("one"):
        return 1.0
    if groups.get("half"):
        return float(_SPOKEN_TIMES[groups["half"]])
    if groups.get("w"):
        return float(_WORDS[groups["w"]])
    number = float(groups["n"].replace(",", ""))
    return number * 1000 if groups.get("k") else number


def find_quantities(text: str) -> list[Quantity]:
    """Every number phrase of `text` (lowercase), spans not overlapping, in text order."""
    taken: list[tuple[int, int]] = []
    found: list[Quantity] = []

    def claim(field: str, pattern: re.Pattern[str], scale: float = 1.0) -> None:
        for match in pattern.finditer(text):
            start, end = match.span()
            if any(start < b and a < end for a, b in taken):
                continue
            value = _value(match)
            if field == "max_runtime_s" and match.groupdict().get("u"):
                value *= _UNITS[match.group("u")]
            taken.append((start, end))
            found.append(Quantity(field, value * scale, start, end, match.group(0).strip()))

    claim("budget_usd", MONEY[0])  # "a budget of 50": money before any unit is tried
    claim("budget_usd", MONEY[1])  # a sign next: "$10 in 10 minutes" is money and time
    claim("max_runtime_s", TIME)
    claim("max_runtime_s", AN_HOUR)
    for pattern in PARALLEL:
        claim("max_parallel", pattern)
    for pattern in MONEY:
        claim("budget_usd", pattern)
    claim("unknown", BARE)
    return sorted(found, key=lambda q: q.start)

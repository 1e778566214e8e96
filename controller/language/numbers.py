"""Numbers in a request: money, parallelism and a runtime limit, each by its unit.

A number is money only with a money sign or word ("$50", "50 dollars", "USD 20",
"a budget of 50", "budget=25"); it is a runtime limit with a time unit ("under 10
minutes", "half an hour", "max_runtime=600s"), and parallelism with a parallel phrase
("4 at a time", "at most 3 of them at a time", "in batches of 2", "-j4",
"sequentially"). The words around a number that only say it is a limit ("keep the
bill under", "nothing that takes longer than", "don't run more than") belong to the
phrase. A bare number is left in the text for the grammar: before a name it is a
count ("the 7 quick templates"), else it is not understood. Matching is on whole
words: the patterns never start or end inside a word.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NUM = r"(?P<n>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)(?P<k>k)?"
_WORDS = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "fifteen": 15,
    "sixteen": 16, "twenty": 20, "twenty-five": 25, "thirty": 30, "forty": 40,
    "forty-five": 45, "fifty": 50, "sixty": 60, "ninety": 90, "hundred": 100,
    "a hundred": 100, "one hundred": 100, "two hundred": 200, "five hundred": 500,
    "a thousand": 1000, "a couple of": 2, "a couple": 2,
}
_WORD_NUM = r"(?P<w>" + "|".join(sorted(_WORDS, key=len, reverse=True)) + r")(?![a-z-])"
_COUNT = rf"(?:{_NUM}|{_WORD_NUM})"
_START = r"(?<![\w$.-])"
_END = r"(?![\w-])"


def _any(*alternatives: str) -> str:
    return "(?:" + "|".join(alternatives) + ")"


# Words before an amount that only say it is an upper limit; up to three may stack
# ("for under", "in at most").
_LIMIT = _any(
    r"under", r"below", r"less than", r"within", r"in", r"at most", r"max(?:imum)?(?: of)?",
    r"up to", r"no more than", r"not more than", r"inside", r"limit(?:ed)?(?: of| to)?",
    r"cap(?:ped)?(?: of| at)?", r"for", r"than", r"tops", r"not over", r"nothing over",
    r"never over", r"not exceeding", r"no higher than", r"at or under", r"keep(?:ing)? it",
    r"keep(?:ing)? (?:the )?(?:bill|cost|costs|spend|spending|total)(?: down)?",
    r"cap (?:the |our |my )?(?:spend|spending|cost|costs|budget|bill|total)(?: at)?",
    r"(?:stop|halt) if (?:it|we|the run|the cost|the bill) (?:goes|go|gets|get) (?:over|above)",
    r"(?:do not|don't|dont) (?:spend|go) (?:more than|over|above)",
    r"spend(?:ing)?(?: at most| up to| no more than| under| less than)?",
    r"(?:a |the )?(?:spending |cost |budget )?(?:ceiling|cap|limit) of", r"(?:a |the )?max of",
    r"(?:stop|halt|cut (?:it )?off|cap it) (?:at|once (?:it|we) (?:hit|reach)(?:es)?)",
)
_PRE = rf"(?:{_LIMIT}\s+){{0,3}}"
_MONEY_WORD = r"(?:dollars?|usd|bucks?)"
_MONEY_POST = (r"(?:\s+(?:max(?:imum)?|tops|total|in total|budget|limit|cap|overall|ceiling|"
               r"spending (?:limit|cap|ceiling)|cost (?:limit|cap|ceiling)|or less|at most))?")
_MONEY_PATTERNS = (
    rf"{_START}{_PRE}(?:(?:a|the|our|my|total)\s+){{0,2}}budget(?:\s+(?:of|is|to|at|cap|"
    rf"limit))?\s*[=:]?\s*(?:(?:under|at most|up to|max|of)\s+)?(?:\$\s*|usd\s*)?{_NUM}"
    rf"(?:\s*{_MONEY_WORD})?{_MONEY_POST}{_END}",
    rf"{_START}{_PRE}\$\s*{_NUM}{_MONEY_POST}{_END}",
    rf"{_START}{_PRE}usd\s*{_NUM}{_MONEY_POST}{_END}",
    rf"{_START}{_PRE}{_NUM}\s*(?:\$|{_MONEY_WORD})(?![\w-]){_MONEY_POST}",
    rf"{_START}{_PRE}{_WORD_NUM}\s+{_MONEY_WORD}{_MONEY_POST}{_END}",
    rf"{_START}{_PRE}(?P<a>a|one)\s+(?:dollar|buck){_MONEY_POST}{_END}",
)
_UNIT = r"(?P<u>seconds?|secs?|s|minutes?|mins?|m|hours?|hrs?|h)"
_SPOKEN_TIMES = {
    "half an hour": 1800, "half hour": 1800, "a half hour": 1800,
    "an hour and a half": 5400, "an hour": 3600, "one hour": 3600, "a day": 86400,
    "a quarter of an hour": 900, "quarter of an hour": 900, "a quarter hour": 900,
    "quarter hour": 900, "three quarters of an hour": 2700,
}
_SPOKEN = r"(?P<spoken>" + "|".join(sorted(_SPOKEN_TIMES, key=len, reverse=True)) + ")"
# A limit said the other way round: nothing longer than, skip anything slower than.
_LONGER = r"(?:longer|slower|more)\s+than"
_TAKES = r"(?:(?:that|which)\s+)?(?:(?:can|could|will|would|might)\s+)?" \
         r"(?:takes?|runs?|lasts?|is|are|goes|go|needs?)?\s*(?:for\s+)?"
_TIME_PRE = _any(
    rf"(?:nothing|none|no templates?|no sims?)\s+{_TAKES}{_LONGER}",
    rf"(?:no|not)\s+{_LONGER}",
    rf"(?:skip|drop|exclude|leave out|omit)\s+(?:anything|everything|whatever|templates?|ones?|"
    rf"those|the ones)\s+{_TAKES}{_LONGER}",
    r"(?:only\s+)?(?:what|whatever|those|the ones|ones|anything|templates?)?\s*(?:(?:that|which)"
    r"\s+)?(?:(?:can|could|will)\s+)?(?:be\s+)?(?:finish(?:es|ed)?|complete[sd]?|done|takes?"
    r"|lasts?)\s+(?:in|within|under|in under|in less than|less than|by)",
    r"(?:max(?:imum)?[ _-]?)?(?:runtime|run time|run-time|duration|time limit|time budget|"
    r"wall time|wall-clock)(?:[ _-]?limit)?\s*(?:of|is|=|:)?",
    r"shorter than", r"faster than", r"in under", r"in less than",
)
_IF_LONGER = (rf"(?:if|when)\s+(?:anything|something|a template|any template|one|any)\s+"
              rf"(?:is|takes|runs|would take|will take)\s+{_LONGER}")
_LEAVE_IT = (r"[,]?\s*(?:(?:just|then)\s+)?(?:leave|skip|drop|exclude|omit)\s+(?:it|them|that|"
             r"those)(?:\s+out)?")
_TIME_CORE = rf"(?:{_COUNT}\s*-?\s*{_UNIT}|{_SPOKEN})"
_TIME_POST = r"(?:\s+(?:max(?:imum)?|tops|or less|each|per template|apiece))?"
_TIME_PATTERNS = (
    rf"{_START}{_IF_LONGER}\s+{_TIME_CORE}{_LEAVE_IT}{_END}",
    rf"{_START}(?:{_TIME_PRE}\s*)?{_PRE}{_TIME_CORE}{_TIME_POST}{_END}",
    rf"{_START}max[ _-]?runtime(?:[ _-]?s)?\s*[=:]\s*(?P<bare>{_NUM}){_END}",  # seconds
)
_PARALLEL_QUALIFIER = _any(
    r"max(?:imum)?(?: of)?", r"at most", r"up to", r"no more than", r"not more than",
    r"never more than", r"only", r"with", r"with at most", r"with up to", r"with no more than",
    r"limit(?: of)?", r"cap(?: of)?", r"(?:do not|don't|dont) run more than",
    r"keep it (?:to|at)",
)
_PARALLEL_NOUN = (r"(?:(?:of them|of those|of these|sandboxe?s?|jobs?|templates?|containers?|"
                  r"sims?|simulations?|runs?|things|workers|instances)\s+)?"
                  r"(?:(?:running|going|run|in flight|executing|active|max)\s+)?")
_PARALLEL_TAIL = _any(
    r"at a time", r"at once", r"at the same time", r"in parallel", r"parallel(?: workers| jobs|"
    r" sandboxes| slots)?", r"concurrently", r"concurrent", r"simultaneously", r"together",
    r"side by side", r"in flight", r"workers?", r"slots?", r"threads?", r"-?way parallel", r"wide",
    r"in parallel max",
)
_PARALLEL_KEY = (r"(?:(?:a|the)\s+)?(?:max(?:imum)?[ _-]?)?(?:parallelism|concurrency|parallel|"
                 r"par|workers|jobs|max[ _-]?parallel)")
_ONE_AT_A_TIME = _any(
    r"one at a time", r"one by one", r"one after (?:the )?other", r"sequential(?:ly)?",
    r"serially", r"in sequence", r"in series", r"no parallelism", r"not in parallel",
    r"without parallelism", r"no concurrency", r"without concurrency", r"in serial",
    r"serial(?:ly)?",
    r"single[- ]threaded", r"one-at-a-time", r"one after another",
)
_PARALLEL_PATTERNS = (
    rf"{_START}(?:{_PARALLEL_QUALIFIER}\s+){{0,2}}{_COUNT}\s*(?:x\s+)?{_PARALLEL_NOUN}"
    rf"{_PARALLEL_TAIL}{_END}",
    rf"{_START}(?:(?:cap|limit|set|with)\s+)?{_PARALLEL_KEY}\s*(?:of|=|:|to|at|is|level|"
    rf"level of|set to|capped at|limited to|limit(?: of)?|cap(?: of)?|at most|max|up to)?\s*"
    rf"{_COUNT}{_END}",
    rf"{_START}(?P<pairs>in pairs|two by two|pairwise){_END}",
    rf"{_START}(?:in\s+)?(?:batch(?:es)?|groups?|waves?|chunks?) of\s+{_COUNT}{_END}",
    rf"(?<![\w$.])-j\s*(?P<j>\d+){_END}|{_START}j\s*[=:]\s*(?P<j2>\d+){_END}",
    rf"{_START}(?P<one>{_ONE_AT_A_TIME}){_END}",
)
_UNITS = {"s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1, "m": 60, "min": 60,
          "mins": 60, "minute": 60, "minutes": 60, "h": 3600, "hr": 3600, "hrs": 3600,
          "hour": 3600, "hours": 3600}
MONEY = tuple(re.compile(p) for p in _MONEY_PATTERNS)
TIME = tuple(re.compile(p) for p in _TIME_PATTERNS)
PARALLEL = tuple(re.compile(p) for p in _PARALLEL_PATTERNS)
NUMBER_WORDS = frozenset(w for phrase in _WORDS for w in phrase.split())
# Every word these patterns know, so that the spelling corrector leaves them alone.
VOCABULARY = frozenset(re.findall(r"[a-z]{3,}", " ".join(
    [*_MONEY_PATTERNS, *_TIME_PATTERNS, *_PARALLEL_PATTERNS, *_WORDS, *_SPOKEN_TIMES])))


@dataclass(frozen=True)
class Quantity:
    """One number phrase: which field it sets, its value, and where it was."""

    field: str  # budget_usd | max_parallel | max_runtime_s
    value: float
    start: int
    end: int
    text: str


def _value(match: re.Match[str]) -> float:
    groups = match.groupdict()
    if groups.get("one"):
        return 1.0
    if groups.get("a"):
        return 1.0
    if groups.get("pairs"):
        return 2.0
    if groups.get("spoken"):
        return float(_SPOKEN_TIMES[groups["spoken"]])
    for name in ("j", "j2"):
        if groups.get(name):
            return float(groups[name])
    if groups.get("w"):
        return float(_WORDS[groups["w"]])
    number = float(groups["n"].replace(",", ""))
    return number * 1000 if groups.get("k") else number


def find_quantities(text: str) -> list[Quantity]:
    """Every number phrase of `text` (lowercase), spans not overlapping, in text order."""
    taken: list[tuple[int, int]] = []
    found: list[Quantity] = []

    def claim(field: str, pattern: re.Pattern[str]) -> None:
        at = 0
        while (match := pattern.search(text, at)) is not None:
            start, end = match.span()
            inside = [a for a, b in taken if start < a < end]
            if inside and not any(a <= start < b for a, b in taken):
                # "1 dollars max 1 in parallel": the words after the amount belong to the
                # phrase already read; the amount alone may still be taken
                match = pattern.match(text, start, min(inside)) or match
                start, end = match.span()
            if start == end or any(start < b and a < end for a, b in taken):
                at = start + 1  # a later, shorter match may still be free
                continue
            at = end
            value = _value(match)
            if field == "max_runtime_s" and match.groupdict().get("u"):
                value *= _UNITS[match.group("u")]
            taken.append((start, end))
            found.append(Quantity(field, value, start, end, match.group(0).strip(" ,")))

    claim("budget_usd", MONEY[0])  # "a budget of 50": money before any unit is tried
    claim("budget_usd", MONEY[1])  # a sign next: "$10 in 10 minutes" is money and time
    for pattern in TIME:
        claim("max_runtime_s", pattern)
    for pattern in PARALLEL:
        claim("max_parallel", pattern)
    for pattern in MONEY[2:]:
        claim("budget_usd", pattern)
    return sorted(found, key=lambda q: q.start)

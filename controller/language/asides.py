"""What a request says besides what to run, set aside before it is read. Pure: no I/O.

- `normalise`: lowercase, one kind of quote and dash, CI flags and `key=value` pairs
  as words ("--priority=cost" -> "priority cost", "suites=quick" -> "suites quick");
- `set_aside`: a question riding on the request ("run quick and tell me the cost",
  "; what will it cost roughly?": the plan answers it), the reason given before the
  request ("We're trying to compare ... , so could you run X": X is the request), and a
  purpose after it ("one at a time so the logs don't interleave"). An aside that names
  a template, a suite or a number is never set aside: the request is read whole, and
  what it cannot read makes it ask.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_FLAG = re.compile(r"(?<![\w-])--?(?=(?:priority|max[-_]?parallel|parallel(?:ism)?|concurrency|"
                   r"budget|suites?|templates?|max[-_]?runtime|runtime|workers|dry[-_]run|"
                   r"plan|yes)\b)")
_KEYS = (r"priority|suites?|templates?|categor(?:y|ies)|strategy|mode|budget(?:_usd)?|"
         r"max[_-]?parallel|parallel(?:ism)?|concurrency|workers|max[_-]?runtime(?:_s)?|runtime")
_KEY_VALUE = re.compile(rf"(?<![\w-])({_KEYS})\s*[=:]\s*(?=[\w$])")
_RUN_VERB = r"(?:run|start|launch|kick|fire|execute|rerun|re-run|do|test|try|spin|queue|go)\b"
_RIDER = re.compile(
    r"(?:\s*[,;]\s*|\s+-\s+|\s+)(?:and\s+)?(?:then\s+)?(?:(?:please|pls|also)\s+)?"
    r"(?:(?:tell|show|let)\s+(?:me|us)(?:\s+know)?|report(?:\s+back)?|send\s+me|ping\s+me|"
    r"(?:how\s+(?:long|much)|what)\s+(?:will|would|does|did|is|should)\s+(?:that|it|this|they|"
    r"the run|those|these)|how\s+long\s+(?:will|would)\s+(?:that|it|this)\s+take|"
    r"what(?:'s| is| will be)\s+the\s+(?:eta|cost|estimate|price|damage|total))"
    r"\b[^.;!?]*[.!?]?\s*$"
)
_REASON = re.compile(
    rf"^(?P<why>.+?)[,;]?\s+so\s+(?=(?:(?:could|can|would|will)\s+(?:you|u)\s+|please\s+|"
    rf"pls\s+|just\s+|go ahead and\s+|i'd like you to\s+)*(?:please\s+)?{_RUN_VERB})"
)
# A clause before the request that names nothing ("for the board demo tomorrow, run X").
_LEAD = re.compile(
    rf"^(?P<why>[^,;:.!?]+?)(?:\s*[,;:.!]|\s+-)\s+(?=(?:so\s+)?(?:(?:could|can|would|will)\s+"
    rf"(?:you|u)\s+|please\s+|pls\s+|just\s+)*(?:please\s+)?{_RUN_VERB})|"
    rf"^(?P<after>(?:after|before|since|following|given|because of|for)\s[^,;:.!?]+?)\s+"
    rf"(?=(?:please|pls|could you|can you)\s)"
)
# A reason after it: "since the box is small", "because the logs interleave".
_BECAUSE = re.compile(r"\s+(?:since|because|cause|cuz|'cause)\s+[^,;.!?]*")
_PURPOSE = re.compile(
    rf"\s+so(?:\s+that)?\s+(?!(?:(?:could|can|would|will)\s+(?:you|u)|please|{_RUN_VERB}))"
    r"[^,;.!?]*"
)


def normalise(text: str) -> str:
    """Lowercase with plain quotes and dashes, flags and key=value pairs as words."""
    text = text.lower().replace("\u2019", "'").replace("\u2018", "'")
    text = re.sub(r"(?<![\w/])w/o(?![\w/])", "without", text)
    text = re.sub(r"(?<![\w/])w/(?![\w/])", "with ", text)
    text = re.sub(r"<=|=<", " at most ", re.sub(r">=|=>", " at least ", text))
    text = re.sub(r"<", " under ", re.sub(r"(?<![-=])>", " over ", text))
    text = re.sub(r"(?<=[a-z0-9])/(?=[a-z])(?!cd\b)", " / ", text)  # "quick/full": a list
    text = re.sub(r"\s[\u2013\u2014]\s|[\u2013\u2014]", " - ", text)
    text = _FLAG.sub(" ", text)
    return _KEY_VALUE.sub(lambda m: m.group(1) + " ", text)


def set_aside(text: str, names: Callable[[str], bool],
              says: Callable[[str], bool]) -> tuple[str, list[tuple[str, str]]]:
    """The request without its asides, and each aside with what it was taken for.

    `says(part)`: the part says something the grammar reads besides names (a priority,
    an exclusion, a number...); `names(part)`: it names templates. Such a part is never
    set aside, except that a reason before an explicit request may name things: it says
    what the request is about ("compare the detective scenarios ..., so could you run X"
    runs X). The text keeps its length (asides become spaces), so spans found later
    still point into the original.
    """
    asides: list[tuple[str, str]] = []

    def blank(match: re.Match[str], group: int | str, meaning: str, named: bool = False) -> str:
        start, end = match.span(group)
        part = text[start:end]
        if not part.strip(" ,;.") or says(part) or (not named and names(part)):
            return text
        asides.append((part.strip(" ,;.!?"), meaning))
        return text[:start] + " " * (end - start) + text[end:]

    rider = _RIDER.search(text)
    if rider:
        text = blank(rider, 0, "a question about the run: the plan shows its estimated cost "
                     "and time; ask again once it runs")
    reason = _REASON.search(text)
    if reason:
        text = blank(reason, "why", "the reason for the request, not what to run", named=True)
    lead = _LEAD.search(text)
    if lead:
        polite = bool(re.match(r"\s*(?:so\s+)?(?:could|can|would|will|please|pls)\b",
                               text[lead.end():]))
        text = blank(lead, "why" if lead.group("why") else "after",
                     "the reason for the request, not what to run", named=polite)
    for purpose in [*_PURPOSE.finditer(text), *_BECAUSE.finditer(text)]:
        text = blank(purpose, 0, "the purpose of the request, not what to run")
    return text, asides

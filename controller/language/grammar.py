"""A request in plain words, read into a `Reading` that explains itself. Pure: no I/O.

`read_request(catalog, text)` reads in steps, each its own module:

1. `asides.normalise`: lowercase, plain quotes, CI flags and `key=value` as words;
2. `typos`: a word one slip from exactly one known word is read as it (noted);
3. `asides.set_aside`: a question riding on the request, a reason before it, a
   purpose after it (noted, never read as names);
4. `numbers`: money, parallelism and time phrases, each by its unit;
5. `walk`: the words, longest known phrase first, into groups of names (included or
   excluded) and modifiers (priority, run or plan);
6. `selection` (with `families`): what the groups select, within what they are
   excluded from.

Each phrase is recorded with what it became; words it does not know are listed, never
guessed at. A request that names nothing, could mean several things, or has words
left unread next to what it names gets `choices` (the seed's "progressive
refinement") instead of a selection: a wrong reading costs more than a question.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from controller.catalog.templates import Catalog
from controller.language import numbers
from controller.language.asides import normalise, set_aside
from controller.language.choices import (
    Choice,
    family_choices,
    menu_choices,
    option_choices,
    partial_options,
)
from controller.language.lexicon import BOUNDARY, NAMES, Kind, Lexicon, lexicon_for, tokenize
from controller.language.selection import Selection, select
from controller.language.typos import Speller, speller
from controller.language.walk import Phrase, Walk, items_of, walk_words
from controller.language.words import COMMON, ENGLISH

MAX_REQUEST_CHARS = 2000
_FIELD_WORDS = {"budget_usd": "budget", "max_parallel": "parallelism",
                "max_runtime_s": "runtime limit"}

__all__ = ["MAX_REQUEST_CHARS", "Phrase", "Reading", "read_request"]


@dataclass(frozen=True)
class Reading:
    """What a request asked for, and how each of its phrases was read."""

    text: str
    suites: tuple[str, ...] = ()
    templates: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    budget_usd: float | None = None
    max_parallel: int | None = None
    max_runtime_s: float | None = None
    priority: str | None = None
    intent: str | None = None
    phrases: tuple[Phrase, ...] = ()
    not_understood: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    choices: tuple[Choice, ...] = ()
    ask: str | None = None  # why it asks, when it offers choices for more than naming nothing

    @property
    def names_something(self) -> bool:
        return bool(self.suites or self.templates)

    def interpretation(self) -> dict[str, Any]:
        """The plan's `interpretation`: each phrase and its meaning, and what was not read."""
        return {
            "text": self.text,
            "phrases": [{"text": p.text, "meaning": p.meaning} for p in self.phrases],
            "not_understood": list(self.not_understood),
            "notes": list(self.notes),
            "choices": [c.public() for c in self.choices],
        }


def read_request(catalog: Catalog, text: str) -> Reading:
    """Read one request against the catalog."""
    text = text[:MAX_REQUEST_CHARS]
    lexicon = lexicon_for(catalog)
    walk = Walk()
    lowered = spell(catalog, normalise(text), walk)
    lowered, asides = set_aside(lowered, lambda part: names_anything(lexicon, part),
                                lambda part: says_more(lexicon, part))
    for aside, meaning in asides:
        walk.phrases.append(Phrase(aside, meaning))
    walk_words(lexicon, _read_numbers(lowered, walk), walk)
    return _resolve(catalog, text, walk)


_SPELLERS: dict[int, tuple[Catalog, Speller]] = {}


def spell(catalog: Catalog, text: str, walk: Walk | None = None) -> str:
    """`text` with each slip of a known word corrected (noted in `walk`)."""
    cached = _SPELLERS.get(id(catalog))
    if cached is None or cached[0] is not catalog:
        ours = lexicon_for(catalog).vocabulary | numbers.VOCABULARY | COMMON
        never = numbers.NUMBER_WORDS | (ENGLISH - ours)
        cached = (catalog, speller(ours | ENGLISH, never=never))
        if len(_SPELLERS) > 16:
            _SPELLERS.clear()
        _SPELLERS[id(catalog)] = cached
    fixed = text
    vocabulary = lexicon_for(catalog).vocabulary
    for word, start, end in reversed(tokenize(text)):
        if word.endswith("'s") and word[:-2] in vocabulary and word not in COMMON:
            fixed = fixed[:start] + word[:-2] + "  " + fixed[end:]  # "quick's": quick
            continue
        right = cached[1].correct(word)
        if right is not None:
            fixed = fixed[:start] + right + fixed[end:]
            if walk is not None:
                walk.notes.insert(0, f"read {word!r} as {right!r}")
    return fixed


_MORE = frozenset({Kind.PRIORITY, Kind.EXCLUDE, Kind.LEAVE, Kind.BREADTH, Kind.SUITE_WORD,
                   Kind.CATEGORY_WORD, Kind.OR, Kind.TOPIC, Kind.COUNT})


def names_anything(lexicon: Lexicon, text: str) -> bool:
    """Whether `text` names a suite, a template, a tag, a family or a quality."""
    return any(item.kind in NAMES for item in items_of(lexicon, text))


def says_more(lexicon: Lexicon, text: str) -> bool:
    """Whether `text` says what the grammar reads besides names: a number, a priority..."""
    return bool(numbers.find_quantities(text)) or bool(re.search(r"\d|\$", text)) or any(
        item.kind in _MORE for item in items_of(lexicon, text))


def _read_numbers(text: str, walk: Walk) -> str:
    chars = list(text)
    for quantity in numbers.find_quantities(text):
        size = quantity.end - quantity.start
        chars[quantity.start : quantity.end] = BOUNDARY + " " * (size - 1)
        walk.numbers.setdefault(quantity.field, []).append(quantity.value)
        walk.phrases.append(Phrase(quantity.text, _number_meaning(quantity.field,
                                                                  quantity.value)))
    return "".join(chars)


def _number_meaning(field_name: str, value: float) -> str:
    if field_name == "budget_usd":
        return f"budget ${value:,.2f}"
    if field_name == "max_parallel":
        return f"at most {int(value)} sandboxes at once"
    return f"runtime limit {_duration(value)}"


def _duration(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{int(seconds // 3600)} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{int(seconds // 60)} min"
    return f"{seconds:g} s"


def _resolve(catalog: Catalog, text: str, walk: Walk) -> Reading:
    found = {name: min(values) for name, values in walk.numbers.items()}
    for name, values in walk.numbers.items():
        if len(set(values)) > 1:
            walk.notes.append(
                f"several values for the {_FIELD_WORDS[name]}: the smallest, "
                f"{_number_meaning(name, found[name])}, is used"
            )
    budget = found.get("budget_usd")
    selection = select(catalog, walk)
    choices, ask = _choices(catalog, walk, selection, budget)
    if ask:
        walk.notes.append(f"asking rather than guessing: {ask}")
    chosen = not choices
    return Reading(
        text=text,
        suites=tuple(dict.fromkeys(selection.suites)) if chosen else (),
        templates=tuple(dict.fromkeys(selection.templates)) if chosen else (),
        exclude=tuple(selection.exclude) if chosen else (),
        budget_usd=budget,
        max_parallel=int(found["max_parallel"]) if "max_parallel" in found else None,
        max_runtime_s=found.get("max_runtime_s"),
        priority=_priority(walk),
        intent=walk.intent,
        phrases=tuple(walk.phrases),
        not_understood=tuple(dict.fromkeys(walk.unknown)),
        notes=tuple(dict.fromkeys(walk.notes)),
        choices=tuple(choices),
        ask=ask,
    )


def _choices(catalog: Catalog, walk: Walk, selection: Selection,
             budget: float | None) -> tuple[list[Choice], str | None]:
    """The choices to offer instead of a selection ([] to go ahead), and why."""
    partial = partial_options(catalog, walk.unread or [
        w for w in walk.unknown if w not in walk.parts])  # not the words already tried in scope
    if selection.ask is not None:
        return _or_menu(catalog, [*partial, *selection.options], budget), selection.ask
    if selection.menu:
        if partial:
            return option_choices(catalog, partial), "the words name no template I know"
        return menu_choices(catalog, budget), None
    if selection.qualities_alone:
        return family_choices(catalog, selection.qualities_alone), None
    if walk.asks:
        said = ", ".join(repr(w) for w in walk.unread)
        as_read = ("as read, without " + said, tuple(selection.suites), ()) if not (
            selection.templates or selection.exclude) else (
            "as read, without " + said, (), _ids(catalog, selection))
        return _or_menu(catalog, [as_read, *partial], budget), "; ".join(walk.asks)
    return [], None


def _or_menu(catalog: Catalog, options: list[tuple[str, tuple[str, ...], tuple[str, ...]]],
             budget: float | None) -> list[Choice]:
    return option_choices(catalog, options) or menu_choices(catalog, budget)


def _ids(catalog: Catalog, selection: Selection) -> tuple[str, ...]:
    wanted = dict.fromkeys(t for s in selection.suites for t in catalog.suites[s])
    wanted.update(dict.fromkeys(selection.templates))
    return tuple(t for t in wanted if t not in set(selection.exclude))


def _priority(walk: Walk) -> str | None:
    wanted = list(dict.fromkeys(walk.priorities))
    if "cost" in wanted and "speed" in wanted:
        walk.notes.append("both speed and cost were asked for: cost wins, it spends less")
        return "cost"
    return wanted[-1] if wanted else None

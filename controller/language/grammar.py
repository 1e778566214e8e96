"""A request in plain words, read into a `Reading` that explains itself. Pure: no I/O.

`read_request(catalog, text)` finds the number phrases first (money, parallelism,
time: `numbers`), then walks the remaining words, longest known phrase first
(`lexicon`), and resolves what they name: suites, templates, tags, the portal
families refined by quality words, exclusions ("but not", "except", "without").
Each phrase is recorded with what it became; words it does not know are listed,
never guessed at. A request that is ambiguous or names nothing gets `choices`
(the seed's "progressive refinement") instead of a selection.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from controller.catalog.templates import Catalog
from controller.language.choices import Choice, broad_choices, family_choices, menu_choices
from controller.language.lexicon import (
    FAMILIES,
    QUALITY_TAGS,
    QUALITY_WORDS,
    Kind,
    Meaning,
    lexicon_for,
    tokenize,
)
from controller.language.numbers import find_quantities

MAX_REQUEST_CHARS = 2000
BROAD_SUITE = 10  # a bare word naming a suite this big gets choices, not a guess
_FIELD_WORDS = {"budget_usd": "budget", "max_parallel": "parallelism",
                "max_runtime_s": "runtime limit"}


@dataclass(frozen=True)
class Phrase:
    text: str
    meaning: str


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


@dataclass
class _Walk:
    """What the word walk collected, before it is resolved against the catalog."""

    include: list[tuple[Meaning, str]] = field(default_factory=list)
    exclude: list[tuple[Meaning, str]] = field(default_factory=list)
    priorities: list[str] = field(default_factory=list)
    breadth: bool = False
    intent: str | None = None
    phrases: list[Phrase] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    numbers: dict[str, list[float]] = field(default_factory=dict)


def read_request(catalog: Catalog, text: str) -> Reading:
    """Read one request against the catalog."""
    text = text[:MAX_REQUEST_CHARS]
    lowered = text.lower().replace("\u2019", "'")
    walk = _Walk()
    masked = _read_numbers(lowered, walk)
    _read_words(catalog, masked, walk)
    return _resolve(catalog, text, walk)


def _read_numbers(text: str, walk: _Walk) -> str:
    chars = list(text)
    for quantity in find_quantities(text):
        chars[quantity.start : quantity.end] = " " * (quantity.end - quantity.start)
        if quantity.field == "unknown":
            walk.unknown.append(quantity.text)
            walk.notes.append(
                f"{quantity.text!r} has no unit: say ${quantity.text.lstrip('$')} for money, "
                f"'{quantity.text} at a time' for parallelism or '{quantity.text} minutes' "
                "for time"
            )
            continue
        walk.numbers.setdefault(quantity.field, []).append(quantity.value)
        walk.phrases.append(Phrase(quantity.text, _number_meaning(quantity.field, quantity.value)))
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


def _read_words(catalog: Catalog, text: str, walk: _Walk) -> None:
    lexicon = lexicon_for(catalog)
    tokens = tokenize(text)
    words = [t[0] for t in tokens]
    excluding: str | None = None  # the exclusion cue in force, if any
    excluded_any = False
    at = 0
    while at < len(words):
        found = lexicon.match(words, at)
        if found is None:
            if words[at] not in ",;.!?":
                walk.unknown.append(words[at])
            _end_exclusion(excluding, excluded_any, walk)
            excluding = None
            at += 1
            continue
        size, meaning = found
        phrase = text[tokens[at][1] : tokens[at + size - 1][2]]
        at += size
        if meaning.kind is Kind.EXCLUDE:
            excluding, excluded_any = phrase, False
        elif meaning.kind in _NAMES:
            if excluding:
                walk.exclude.append((meaning, f"{excluding} {phrase}"))
            else:
                walk.include.append((meaning, phrase))
            excluded_any = excluded_any or excluding is not None
        elif meaning.kind is Kind.FILLER:
            continue
        else:
            _end_exclusion(excluding, excluded_any, walk)
            excluding = None
            _read_modifier(meaning, phrase, walk)
    _end_exclusion(excluding, excluded_any, walk)


_NAMES = {Kind.SUITE, Kind.TEMPLATE, Kind.TAG, Kind.FAMILY, Kind.QUALITY, Kind.ALL}


def _end_exclusion(cue: str | None, used: bool, walk: _Walk) -> None:
    if cue is not None and not used:
        walk.notes.append(f"{cue!r} was not followed by anything I know, so it excludes nothing")


def _read_modifier(meaning: Meaning, phrase: str, walk: _Walk) -> None:
    if meaning.kind is Kind.PRIORITY:
        walk.priorities.append(meaning.value)
        walk.phrases.append(Phrase(phrase, f"priority {meaning.value}"))
    elif meaning.kind is Kind.BREADTH:
        walk.breadth = True
        walk.phrases.append(Phrase(phrase, "all of what is named"))
    elif meaning.kind is Kind.INTENT:
        walk.intent = walk.intent or meaning.value
        walk.phrases.append(
            Phrase(phrase, "start a run" if meaning.value == "run" else "plan only")
        )


def _resolve(catalog: Catalog, text: str, walk: _Walk) -> Reading:
    numbers = {name: min(values) for name, values in walk.numbers.items()}
    for name, values in walk.numbers.items():
        if len(set(values)) > 1:
            walk.notes.append(
                f"several values for the {_FIELD_WORDS[name]}: the smallest, "
                f"{_number_meaning(name, numbers[name])}, is used"
            )
    budget = numbers.get("budget_usd")
    suites, templates, choices = _selection(catalog, walk, budget)
    exclude = _exclusions(catalog, walk)
    priority = _priority(walk)
    return Reading(
        text=text,
        suites=tuple(dict.fromkeys(suites)),
        templates=tuple(dict.fromkeys(templates)),
        exclude=tuple(exclude),
        budget_usd=budget,
        max_parallel=int(numbers["max_parallel"]) if "max_parallel" in numbers else None,
        max_runtime_s=numbers.get("max_runtime_s"),
        priority=priority,
        intent=walk.intent,
        phrases=tuple(walk.phrases),
        not_understood=tuple(dict.fromkeys(walk.unknown)),
        notes=tuple(walk.notes),
        choices=tuple(choices),
    )


def _priority(walk: _Walk) -> str | None:
    wanted = list(dict.fromkeys(walk.priorities))
    if "cost" in wanted and "speed" in wanted:
        walk.notes.append("both speed and cost were asked for: cost wins, it spends less")
        return "cost"
    return wanted[-1] if wanted else None


def _selection(
    catalog: Catalog, walk: _Walk, budget: float | None
) -> tuple[list[str], list[str], list[Choice]]:
    suites, templates, families, qualities = _named(catalog, walk)
    if "judged" in qualities and {"quick", "standard", "thorough"} & set(qualities):
        qualities.remove("judged")  # "simulation judging, be thorough": the level says which
    suites.extend(_family_suites(catalog, walk, families, qualities, budget))
    named = bool(suites or templates)
    if qualities and not families:
        if named:
            walk.notes.append(
                f"{', '.join(QUALITY_WORDS[q] for q in qualities)}: only the portal "
                "families have judged variants; the rest is read as named"
            )
        else:
            return [], [], family_choices(catalog, qualities)
    if not named:
        return [], [], menu_choices(catalog, budget)
    broad = _broad_word(catalog, walk, budget)
    if broad is not None and len(suites) == 1 and not templates and not qualities:
        return [], [], broad_choices(catalog, broad)
    return suites, templates, []


def _named(
    catalog: Catalog, walk: _Walk
) -> tuple[list[str], list[str], dict[str, bool], list[str]]:
    """What the included phrases name: suites, templates, families (explicit?), qualities."""
    suites: list[str] = []
    templates: list[str] = []
    families: dict[str, bool] = {}
    qualities: list[str] = []
    for meaning, phrase in walk.include:
        if meaning.kind is Kind.SUITE:
            suites.append(meaning.value)
            walk.phrases.append(Phrase(phrase, _suite_meaning(catalog, meaning.value)))
        elif meaning.kind is Kind.TEMPLATE:
            templates.append(meaning.value)
            walk.phrases.append(Phrase(phrase, f"template {meaning.value}"))
        elif meaning.kind is Kind.TAG:
            tagged = [t.id for t in catalog.templates.values() if meaning.value in t.tags]
            templates.extend(tagged)
            walk.phrases.append(Phrase(phrase, f"tag {meaning.value} ({len(tagged)} templates)"))
        elif meaning.kind is Kind.ALL and "ultra" in catalog.suites:
            suites.append("ultra")
            walk.phrases.append(Phrase(phrase, _suite_meaning(catalog, "ultra")))
        elif meaning.kind is Kind.FAMILY:
            families[meaning.value] = families.get(meaning.value, False) or meaning.explicit
            walk.phrases.append(Phrase(phrase, _family_meaning(meaning)))
        elif meaning.kind is Kind.QUALITY:
            qualities.append(meaning.value)
            walk.phrases.append(Phrase(phrase, QUALITY_WORDS[meaning.value]))
    return suites, templates, families, list(dict.fromkeys(qualities))


def _family_suites(
    catalog: Catalog,
    walk: _Walk,
    families: dict[str, bool],
    qualities: list[str],
    budget: float | None,
) -> list[str]:
    if "founders" in families and "portal" in families and not families["portal"]:
        del families["portal"]
        walk.notes.append("'portal' with founder profiles reads as the founder portal templates")
    suites: list[str] = []
    for family, explicit in families.items():
        variants = FAMILIES[family]
        if qualities:
            picked = [s for q in qualities for s in variants[q]]
        elif explicit or walk.breadth or budget is not None:
            picked = list(variants["all"])
        else:
            picked = list(variants["none"])
            whole = variants["all"][0]
            walk.notes.append(
                f"{family} alone reads as its standard templates ({', '.join(picked)}); "
                f"say 'all {family} templates' for the whole {whole} suite "
                f"({len(catalog.suites.get(whole, ()))}), or name a judging level"
            )
        suites.extend(s for s in picked if s in catalog.suites)
    return suites


def _broad_word(catalog: Catalog, walk: _Walk, budget: float | None) -> str | None:
    """A big suite named by one plain word ("corporate"), nothing narrowing it."""
    if walk.breadth or budget is not None or walk.exclude:
        return None
    for meaning, phrase in walk.include:
        if (
            meaning.kind is Kind.SUITE
            and phrase == meaning.value
            and "-" not in phrase
            and len(catalog.suites[meaning.value]) >= BROAD_SUITE
        ):
            return meaning.value
    return None


def _exclusions(catalog: Catalog, walk: _Walk) -> list[str]:
    excluded: list[str] = []
    for meaning, phrase in walk.exclude:
        if meaning.kind is Kind.SUITE:
            ids = list(catalog.suites[meaning.value])
        elif meaning.kind is Kind.TEMPLATE:
            ids = [meaning.value]
        elif meaning.kind is Kind.FAMILY:
            ids = [t for s in FAMILIES[meaning.value]["all"] for t in catalog.suites.get(s, ())]
        else:
            tag = meaning.value if meaning.kind is Kind.TAG else QUALITY_TAGS.get(meaning.value)
            ids = [t.id for t in catalog.templates.values() if tag and tag in t.tags]
        excluded.extend(ids)
        plural = "" if len(ids) == 1 else "s"
        walk.phrases.append(Phrase(phrase, f"exclude {len(ids)} template{plural}"))
    return list(dict.fromkeys(excluded))


def _suite_meaning(catalog: Catalog, name: str) -> str:
    return f"suite {name} ({len(catalog.suites[name])} templates)"


def _family_meaning(meaning: Meaning) -> str:
    if meaning.value == "founders":
        return "founder profiles: the portal-timepoint templates"
    return "portal templates"

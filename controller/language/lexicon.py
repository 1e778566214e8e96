"""The words the principal knows: the catalog's names and its own words, as token sequences.

Every entry is a sequence of whole words (tokens) with one `Meaning`. The catalog
gives suite names, categories, template ids and tags, each as written
("portal-simjudged-quick", "board_meeting") and as spoken ("portal simjudged
quick", "board meeting"); `words` gives the rest. A suite name wins over a template
id, and both win over a tag, when they are spelled the same. The lexicon also keeps
every word it knows (`vocabulary`), which the spelling corrector leaves alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from controller.catalog.templates import Catalog
from controller.language import words as w


class Kind(StrEnum):
    SUITE = "suite"
    TEMPLATE = "template"
    TAG = "tag"
    FAMILY = "family"  # portal / founders / both: refined by a quality word
    AMBIGUOUS = "ambiguous"  # "founder", "a full run": two sets at once
    ALL = "all"
    QUALITY = "quality"
    BREADTH = "breadth"  # "all", "every", "the rest of": the whole of what is named
    SUITE_WORD = "suite_word"  # "suite": the name before it must be a suite
    CATEGORY_WORD = "category_word"
    NOUN = "noun"  # "templates", "ones": a set was meant
    TOPIC = "topic"  # "analysis": the name before it is a subject, not a selection
    PRIORITY = "priority"
    INTENT = "intent"
    EXCLUDE = "exclude"
    LEAVE = "leave"  # "leave X out"
    UNION = "union"
    OR = "or"
    PRONOUN = "pronoun"
    COUNT = "count"
    FILLER = "filler"


NAMES = frozenset({Kind.SUITE, Kind.TEMPLATE, Kind.TAG, Kind.FAMILY, Kind.AMBIGUOUS, Kind.ALL,
                   Kind.QUALITY})


@dataclass(frozen=True)
class Meaning:
    kind: Kind
    value: str = ""
    explicit: bool = False  # a family named by its suite's own name


def _own_words() -> dict[tuple[str, ...], Meaning]:
    table: dict[tuple[str, ...], Meaning] = {}

    def add(meaning: Meaning, text: str) -> None:
        for phrase in w.phrases(text):
            table[tuple(phrase.split())] = meaning

    add(Meaning(Kind.FILLER), " | ".join(w.FILLER.split()))
    add(Meaning(Kind.FILLER), w.FILLER_PHRASES)
    add(Meaning(Kind.NOUN), " | ".join(w.NOUNS.split()))
    add(Meaning(Kind.TOPIC), " | ".join(w.TOPIC_NOUNS.split()))
    for word, count in w.COUNTS.items():
        table[(word,)] = Meaning(Kind.COUNT, str(count))
    add(Meaning(Kind.UNION), w.UNION_PHRASES)
    add(Meaning(Kind.OR), w.OR_PHRASES)
    add(Meaning(Kind.BREADTH), w.BREADTH_PHRASES)
    add(Meaning(Kind.SUITE_WORD), w.SUITE_WORDS)
    add(Meaning(Kind.CATEGORY_WORD), w.CATEGORY_WORDS)
    add(Meaning(Kind.LEAVE), w.LEAVE_WORDS)
    for kind, tables in ((Kind.EXCLUDE, w.EXCLUDE_PHRASES), (Kind.PRONOUN, w.PRONOUNS),
                         (Kind.INTENT, w.INTENT_PHRASES),
                         (Kind.PRIORITY, w.PRIORITY_PHRASES),
                         (Kind.QUALITY, w.QUALITY_PHRASES), (Kind.FAMILY, w.FAMILY_PHRASES)):
        for value, text in tables.items():
            add(Meaning(kind, value), text)
    for kind, tables in ((Kind.AMBIGUOUS, w.AMBIGUOUS), (Kind.ALL, w.ALL_PHRASES)):
        for value, text in tables.items():
            add(Meaning(kind, value), text)
    return table


OWN_WORDS = _own_words()
_TOKEN = re.compile(r"[a-z0-9$]+(?:['\u2019/-][a-z0-9]+|_[a-z0-9]+|\.\d+)*|[,;:.!?|+&()/\u00a6-]")
BOUNDARY = "\u00a6"  # where a number phrase was read: it ends a list, like a comma


def tokenize(text: str) -> list[tuple[str, int, int]]:
    """Lowercase words (ids with `_`/`-` kept whole) and punctuation, with their spans."""
    return [(m.group(0).replace("\u2019", "'"), m.start(), m.end()) for m in _TOKEN.finditer(text)]


@dataclass(frozen=True)
class Lexicon:
    """Token sequences to meanings; `longest` is the longest sequence, for matching."""

    entries: dict[tuple[str, ...], Meaning]
    longest: int
    vocabulary: frozenset[str]  # every word of every entry
    categories: frozenset[str]

    def match(self, words: list[str], at: int) -> tuple[int, Meaning] | None:
        """The longest entry starting at `at`: (its length, its meaning)."""
        for size in range(min(self.longest, len(words) - at), 0, -1):
            key = tuple(words[at : at + size])
            meaning = self.entries.get(key) or self.entries.get(_singular(key))
            if meaning is not None:
                return size, meaning
        return None


def _singular(key: tuple[str, ...]) -> tuple[str, ...]:
    last = key[-1]
    if len(last) > 3 and last.endswith("s") and not last.endswith("ss"):
        return (*key[:-1], last[:-1])
    return key


def spellings(name: str) -> list[tuple[str, ...]]:
    """A name as written, with the other separator, and as separate words."""
    words = tuple(w for w in re.split(r"[-_]", name) if w)
    joined = [("".join(words),)] if len(words) > 1 else []  # "boardmeeting"
    head, _, last = name.rpartition("-")
    split = [(head, last)] if "-" in head else []  # "portal-timepoint standard"
    return [(name,), (name.replace("_", "-"),), (name.replace("-", "_"),), words, *joined,
            *split]


_CACHE: dict[int, tuple[Catalog, Lexicon]] = {}


def lexicon_for(catalog: Catalog) -> Lexicon:
    """The lexicon of a catalog (cached: catalogs are immutable once loaded)."""
    cached = _CACHE.get(id(catalog))
    if cached is not None and cached[0] is catalog:
        return cached[1]
    entries: dict[tuple[str, ...], Meaning] = {}
    family_suites = {spec["all"][0]: family for family, spec in w.FAMILIES.items()}
    tags = {tag for t in catalog.templates.values() for tag in t.tags}
    for tag in sorted(tags - set(w.QUALITY_TAGS.values()) - {"judged"}):
        for key in spellings(tag):
            entries[key] = Meaning(Kind.TAG, tag)
    entries.update(OWN_WORDS)
    for template_id in catalog.templates:
        for key in spellings(template_id):
            entries[key] = Meaning(Kind.TEMPLATE, template_id)
    for name in catalog.suites:
        for key in spellings(name):
            if name in family_suites:
                # "portal-timepoint" names the whole suite; the plain word "portal" is
                # the seed's "portal templates", refined by quality words or asked about.
                entries[key] = Meaning(Kind.FAMILY, family_suites[name], len(key) > 1 or
                                       "-" in name)
            elif name == "ultra":
                entries[key] = Meaning(Kind.ALL)
            else:
                entries[key] = Meaning(Kind.SUITE, name)
    vocabulary = frozenset(word for key in entries for word in key)
    lexicon = Lexicon(entries, max(len(k) for k in entries), vocabulary,
                      frozenset(catalog.categories()))
    if len(_CACHE) > 16:
        _CACHE.clear()
    _CACHE[id(catalog)] = (catalog, lexicon)
    return lexicon

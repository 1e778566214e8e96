"""Typos: a word one slip away from exactly one known word is read as that word.

A slip is one letter missing, one extra, one changed, or two neighbours swapped
("qiuck", "budjet", "minuts", "hospitl_crisis"). A word is corrected only when it is
not itself known, the known word is the only one that close, and the slip leaves
enough of the word to be sure: at least 4 letters (3 for a swap: "teh", "rnu"), and
in an id it never replaces a whole short part ("portal_series_b" is not
"portal_series_a": that is another name, not a slip). Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

MIN_LENGTH = 4  # letters, for a letter missing or one too many
MIN_CHANGED = 5  # letters, for a letter changed ("nice" is not "nine")
MIN_PART = 3  # a part of an id shorter than this is never the place of a slip


@dataclass(frozen=True)
class Speller:
    """Known words, indexed by each one-letter deletion, for corrections in O(length)."""

    known: frozenset[str]
    deletions: dict[str, tuple[str, ...]]
    targets: frozenset[str]  # the known words a slip may be read as

    def correct(self, word: str) -> str | None:
        """The one known word `word` is a slip of, or None (known, unsure or nothing close).

        Slips are tried from the likeliest: two letters swapped, then a letter missing,
        then one changed, then one too many; the first kind that finds exactly one known
        word decides ("minuts" is "minutes", a letter missing, before "minus").
        """
        if word in self.known or len(word) < 3 or "'" in word or not re.search(r"[a-z]", word):
            return None  # contractions are left alone: "what's" is not "that's"
        for found in self._slips(word):
            found = {c for c in found if c in self.targets and _safe(word, c)}
            if len(found) == 2:  # "minuts": minute or minutes, one word either way
                short, long = sorted(found, key=len)
                if short + "s" == long:
                    return long if word.endswith("s") else short
            if len(found) == 1:
                return found.pop()
            if found:
                return None
        return None

    def _slips(self, word: str) -> Iterator[set[str]]:
        yield {c for c in _swaps(word) if c in self.known}
        if len(word) < MIN_LENGTH:
            return
        yield set(self.deletions.get(word, ()))  # a letter missing
        gone = _deleted(word)
        if len(word) >= MIN_CHANGED:
            yield {k for g in gone for k in self.deletions.get(g, ())
                   if len(k) == len(word) and _one_changed(word, k)}
        yield {g for g in gone if g in self.known}  # a letter too many


def speller(words: Iterable[str], never: Iterable[str] = ()) -> Speller:
    """A speller of `words`; a slip is never read as one of `never` (e.g. numbers)."""
    known = frozenset(words)
    index: dict[str, set[str]] = {}
    for word in known:
        if len(word) >= MIN_LENGTH - 1:
            for gone in _deleted(word):
                index.setdefault(gone, set()).add(word)
    return Speller(known, {k: tuple(sorted(v)) for k, v in index.items()},
                   known - frozenset(never))


def _plural(a: str, b: str) -> bool:
    return a + "s" == b or b + "s" == a


def _deleted(word: str) -> set[str]:
    return {word[:i] + word[i + 1 :] for i in range(len(word))}


def _swaps(word: str) -> set[str]:
    return {word[:i] + word[i + 1] + word[i] + word[i + 2 :] for i in range(len(word) - 1)
            if word[i] != word[i + 1]}


def _one_changed(a: str, b: str) -> bool:
    return sum(x != y for x, y in zip(a, b, strict=True)) == 1


def _safe(word: str, known: str) -> bool:
    """The slip is inside a part long enough to be a slip, and digits are never changed.

    A plain word is never read as its plural or singular ("thing" is not "things": the
    lexicon reads plurals itself), nor as a word shorter than 4 letters unless two
    letters were swapped ("slow" is not "low").
    """
    if re.sub(r"\D", "", word) != re.sub(r"\D", "", known):
        return False
    plain = not re.search(r"[-_]", known)
    if plain and (_plural(word, known) or (len(known) < MIN_LENGTH and
                                           sorted(word) != sorted(known))):
        return False
    parts_a, parts_b = re.split(r"[-_]", word), re.split(r"[-_]", known)
    if len(parts_a) != len(parts_b):
        return False  # a separator itself slipped: only when each part is long
    for a, b in zip(parts_a, parts_b, strict=True):
        if a != b and (len(a) < MIN_PART or len(b) < MIN_PART):
            return False
    return True

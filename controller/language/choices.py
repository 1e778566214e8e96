"""Choices offered instead of a guess: A) … B) … C) … with counts and costs.

The seed's "progressive refinement": when a request names nothing, names only a
quality ("be thorough"), names something that could be several sets ("portal", "the
founder templates"), or has words the principal could not read next to what it
names, the principal lists what it could mean, each with how many templates and what
they would cost (the sum of their [min, max] estimates), and waits for a pick.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from controller.catalog.templates import Catalog
from controller.language.words import FAMILIES, QUALITY_WORDS

MAX_CHOICES = 6
Option = tuple[str, tuple[str, ...], tuple[str, ...]]  # label, suites, templates
MENU = ("quick", "portal-test", "portal-timepoint-standard", "corporate", "full", "ultra")


@dataclass(frozen=True)
class Choice:
    """One option: the suites and templates it selects, with their count and cost."""

    key: str
    label: str
    suites: tuple[str, ...]
    templates: tuple[str, ...]
    count: int
    estimated_cost_usd: tuple[float, float]

    def public(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "label": self.label,
            "suites": list(self.suites),
            "templates": list(self.templates),
            "count": self.count,
            "estimated_cost_usd": list(self.estimated_cost_usd),
        }

    def line(self) -> str:
        low, high = self.estimated_cost_usd
        return f"{self.key}) {self.label} ({self.count} templates, ${low:,.2f}-{high:,.2f})"


def make_choices(
    catalog: Catalog, options: Sequence[tuple[str, tuple[str, ...], tuple[str, ...]]]
) -> list[Choice]:
    """Letter the options (label, suites, templates), dropping empty and repeated ones."""
    result: list[Choice] = []
    seen: set[frozenset[str]] = set()
    for label, suites, templates in options:
        ids = list(dict.fromkeys([t for s in suites for t in catalog.suites[s]] + list(templates)))
        if not ids or frozenset(ids) in seen:
            continue
        seen.add(frozenset(ids))
        members = [catalog.templates[t] for t in ids]
        cost = (
            round(sum(t.cost_usd[0] for t in members), 2),
            round(sum(t.cost_usd[1] for t in members), 2),
        )
        key = chr(ord("A") + len(result))
        result.append(Choice(key, label, suites, templates, len(ids), cost))
        if len(result) == MAX_CHOICES:
            break
    return result


def menu_choices(catalog: Catalog, budget: float | None) -> list[Choice]:
    """Nothing named: the usual suites (those that fit a budget, when there is one)."""
    names = [s for s in MENU if s in catalog.suites]
    names += sorted((s for s in catalog.suites if s not in names), key=lambda s: len(
        catalog.suites[s]))
    options = [(f"the {s} suite", (s,), ()) for s in names]
    choices = make_choices(catalog, options[: MAX_CHOICES * 3])
    if budget is not None:
        fitting = [c for c in choices if c.estimated_cost_usd[1] <= budget]
        choices = fitting or choices[:1]
    return _relettered(choices)


def family_choices(catalog: Catalog, qualities: list[str]) -> list[Choice]:
    """A quality but no family: that quality of each portal family."""
    options = []
    for family, variants in FAMILIES.items():
        who = "founder profiles (portal-timepoint)" if family == "founders" else "portal"
        for quality in [q for said in qualities for q in (
                ("none", "standard") if said == "std" else (said,))]:
            suites = tuple(s for s in variants[quality] if s in catalog.suites)
            options.append((f"{who}, {QUALITY_WORDS[quality]}", suites, ()))
    return make_choices(catalog, options)


def option_choices(
    catalog: Catalog, options: Sequence[tuple[str, tuple[str, ...], tuple[str, ...]]]
) -> list[Choice]:
    """Options worked out by the reading, lettered (empty and repeated ones dropped)."""
    return make_choices(catalog, [o for o in options if all(
        s in catalog.suites for s in o[1]) and all(t in catalog.templates for t in o[2])])


def partial_options(
    catalog: Catalog, words: Sequence[str]
) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    """Templates whose id a word not understood is part of ("tenure", "founder_transition").

    Every part of the word (split at `_`/`-`, 3 letters or more) must be a part of the
    id; a part that matches nothing is dropped if the rest still pins templates down
    ("portal_unicorn_simjudged_fast": the three judged portal_unicorn variants).
    """
    found: dict[str, None] = {}
    together = "_".join(words)  # "startup unicorn": the parts of one id, said apart
    for word in [together] if _parts_match(catalog, together) else words:
        parts = [p for p in re.split(r"[-_]", word) if len(p) >= 3 and p.isalpha()]
        for keep in [parts, *[parts[:i] + parts[i + 1:] for i in range(len(parts))]]:
            matched = [t for t in catalog.templates
                       if keep and set(keep) <= set(re.split(r"[-_]", t))]
            if matched and len(matched) <= 8:
                found.update(dict.fromkeys(matched))
                if keep is parts:
                    break
    ids = list(found)
    options: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = [
        (t, (), (t,)) for t in ids[: MAX_CHOICES - 1]]
    if len(ids) > 1:
        options.append((f"all {len(ids)} of them", (), tuple(ids)))
    return options


def rare_parts(catalog: Catalog, template_id: str) -> list[str]:
    """The parts of an id that few templates share ("unicorn", not "portal")."""
    parts = [p for p in template_id.replace("-", "_").split("_") if len(p) >= 4]
    return [p for p in parts if sum(p in t.split("_") for t in catalog.templates) <= 8]


def broad_options(catalog: Catalog, suite: str) -> list[Option]:
    """A big suite named as a subject: its main groups by tag, then all of it."""

    members = [catalog.templates[t] for t in catalog.suites[suite]]
    counts = Counter(tag for t in members for tag in t.tags if tag != suite)
    groups = [tag for tag, n in counts.most_common() if 3 <= n < len(members)][:3]
    options: list[Option] = [
        (f"{suite}: {tag}", (), tuple(t.id for t in members if tag in t.tags)) for tag in groups
    ]
    options.append((f"all {suite}", (suite,), ()))
    return options


def _parts_match(catalog: Catalog, word: str) -> bool:
    parts = {p for p in re.split(r"[-_]", word) if len(p) >= 3 and p.isalpha()}
    return len(parts) > 1 and any(parts <= set(re.split(r"[-_]", t)) for t in catalog.templates)


def _relettered(choices: list[Choice]) -> list[Choice]:
    return [
        Choice(chr(ord("A") + i), c.label, c.suites, c.templates, c.count, c.estimated_cost_usd)
        for i, c in enumerate(choices[:MAX_CHOICES])
    ]

"""What the named groups select: suites, templates and exclusions, or a question.

Names said together narrow each other ("corporate founder templates": corporate's
founder templates); groups joined by "and" add up; an exclusion is read within what
is being excluded from ("corporate without the founder ones" leaves out corporate's
4 founder templates, not the founder portal family). A group that could mean several
sets ("portal", "the founder templates", "a full run", "quick portal") is asked
about: each alternative is read as the whole request would be with it, so a pick
carries the rest (other names, exclusions) with it. So is an exclusion that leaves out
nothing that was named, or everything, and a count that does not match ("the three
vc pitch ones" in quick, which has two). Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from controller.catalog.templates import Catalog
from controller.language.ask import Ask, Option
from controller.language.choices import broad_options, rare_parts
from controller.language.families import family_exclusion, read_families
from controller.language.lexicon import Kind, Meaning
from controller.language.walk import Group, Phrase, Walk
from controller.language.words import FAMILIES, QUALITY_TAGS

BROAD_SUITE = 10  # a suite this big named as a subject ("corporate analysis") gets choices
_FAMILY_KINDS = frozenset({Kind.FAMILY, Kind.QUALITY, Kind.AMBIGUOUS})
_BASES = frozenset({Kind.SUITE, Kind.TEMPLATE, Kind.ALL})


@dataclass
class Selection:
    suites: list[str] = field(default_factory=list)
    templates: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    options: list[Option] = field(default_factory=list)  # when it asks instead
    ask: str | None = None
    menu: bool = False  # nothing named: the usual suites are offered
    qualities_alone: list[str] = field(default_factory=list)  # "be thorough": which family?


def select(catalog: Catalog, walk: Walk) -> Selection:
    """The selection the walk's groups make, or the question to ask instead.

    A name that could mean several sets is asked about, unless the request excludes
    part of it: "the portal templates except portal-test" can only mean a reading that
    holds portal-test and more, and of those the smallest is taken (the portal suite).
    """
    try:
        return _Resolver(catalog, walk).selection()
    except Ask as ask:
        readings = []
        for label, meanings in ask.alternatives:
            try:
                picked = _Resolver(catalog, walk, {ask.group: meanings}, ask.replaces
                                   ).selection(quiet=True)
            except Ask:
                continue
            if picked.ask is None and not picked.menu:
                readings.append((label, meanings, picked))
        narrowed = _narrowed_by_exclusion(catalog, walk, ask, readings)
        if narrowed is not None:
            return narrowed
        options = [*ask.options, *[(label, *_ids(catalog, p)) for label, _, p in readings]]
        return Selection(options=options, ask=ask.why)


Reading = tuple[str, list[Meaning], Selection]  # an alternative: its label, meaning, selection


def _narrowed_by_exclusion(catalog: Catalog, walk: Walk, ask: Ask,
                           readings: list[Reading]) -> Selection | None:
    if ask.group is None or walk.groups[ask.group].exclude or not readings or not any(
            g.exclude for g in walk.groups):
        return None
    sizes = [len(_final(catalog, picked)) for _, _, picked in readings]
    if sizes.count(min(sizes)) != 1:
        return None
    label, meanings, _ = readings[sizes.index(min(sizes))]
    walk.notes.append(f"{ask.why}; with the exclusion it can only be one that holds what is "
                      f"excluded, and the smallest of those is {label}")
    return _Resolver(catalog, walk, {ask.group: meanings}, ask.replaces).selection()


def _final(catalog: Catalog, picked: Selection) -> set[str]:
    suites, templates = _ids(catalog, picked)
    return {t for s in suites for t in catalog.suites[s]} | set(templates)


def _ids(catalog: Catalog, picked: Selection) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if not picked.exclude and not picked.templates:
        return tuple(picked.suites), ()
    wanted = dict.fromkeys(t for s in picked.suites for t in catalog.suites[s])
    wanted.update(dict.fromkeys(picked.templates))
    left_out = set(picked.exclude)
    return (), tuple(t for t in wanted if t not in left_out)


class _Resolver:
    def __init__(self, catalog: Catalog, walk: Walk,
                 override: dict[int | None, list[Meaning]] | None = None,
                 replaces: Meaning | None = None) -> None:
        self.catalog, self.walk = catalog, walk
        self.override, self.replaces = override or {}, replaces
        self.phrases: list[Phrase] = []
        self.notes: list[str] = []

    def selection(self, quiet: bool = False) -> Selection:
        groups = self._groups()
        include = [(i, g) for i, g in groups if not g.exclude]
        if not include:
            self.walk.unknown.extend(w for _, g in groups for w in g.partial)
            return Selection(menu=True)
        include = [(i, self._reread(part)) for i, g in include for part in _split(self.catalog, g)]
        if self.walk.either and len(include) > 1:
            raise Ask("'or' asks me to pick one", options=[
                (g.text, (), tuple(self._meaning_ids_of(g))) for _, g in include])
        result = Selection()
        families = [(i, g) for i, g in include if g.kinds() <= _FAMILY_KINDS]
        for i, group in include:
            if (i, group) not in families:
                suites, templates = self._group(i, group)
                result.suites.extend(suites)
                result.templates.extend(templates)
        family_suites, qualities = self._families(families, named=bool(result.suites or
                                                                        result.templates))
        result.suites.extend(family_suites)
        if not (result.suites or result.templates):
            if qualities:
                return Selection(qualities_alone=qualities)
            return Selection(menu=True)
        self._check_redundant(include)
        result.exclude = self._exclusions([(i, g) for i, g in groups if g.exclude], result)
        if not quiet:
            self.walk.phrases.extend(self.phrases)
            self.walk.notes.extend(self.notes)
        return result

    def _groups(self) -> list[tuple[int, Group]]:
        named = []
        for i, group in enumerate(self.walk.groups):
            if i in self.override and self.replaces is not None:  # one name means this
                said = next(p for m, p in group.names if m == self.replaces)
                names = [n for n in group.names if n[0] != self.replaces]
                group = replace(group, names=names + [(m, said) for m in self.override[i]])
            elif i in self.override:  # an alternative being read: the group means this
                said = group.names[0][1]
                group = replace(group, names=[(m, said) for m in self.override[i]])
            named.append((i, group))
        others = any(m.value != "them" for _, g in named if not g.exclude
                     for m, _ in g.names)
        # "run quick, all of them": the words point back at quick.
        return [(i, g) for i, g in named if not (others and g.names and all(
            m.kind is Kind.ALL and m.value == "them" for m, _ in g.names))]

    # --- a group of names said together --------------------------------------------------

    def _reread(self, group: Group, scope: set[str] | None = None) -> Group:
        """A word with two meanings, read by the names beside it (or the scope excluded from).

        "corporate founder templates": with a suite beside it, "founder" is the tag.
        "portal-simjudged without the quick ones": "quick" is the judging level there,
        since the quick suite has nothing in portal-simjudged.
        """
        bases = [m for m, _ in group.names if m.kind in _BASES]
        tags = [m for m, _ in group.names if m.kind is Kind.TAG]
        names = []
        for meaning, phrase in group.names:
            if meaning.kind is Kind.AMBIGUOUS and meaning.value == "founders" and (bases or tags):
                meaning = Meaning(Kind.TAG, "founder")
            elif (meaning.kind is Kind.SUITE and meaning.value in QUALITY_TAGS and (
                    len(bases) > 1 or (scope is not None and not scope & set(
                        self.catalog.suites[meaning.value])))):
                meaning = Meaning(Kind.QUALITY, meaning.value)
            names.append((meaning, phrase))
        return replace(group, names=names)

    def _meaning_ids_of(self, group: Group) -> list[str]:
        ids = [self._meaning_ids(m) for m, _ in group.names]
        return sorted(set.intersection(*map(set, ids))) if ids else []

    def _group(self, index: int, group: Group) -> tuple[list[str], list[str]]:
        kinds = group.kinds()
        if kinds & _FAMILY_KINDS - {Kind.QUALITY}:
            raise Ask(f"{group.text!r} names different things side by side",
                      options=self._side_by_side(group))
        bases = [m for m, _ in group.names if m.kind in _BASES]
        if len(bases) > 1:
            raise Ask(f"{group.text!r} names different things side by side",
                      options=self._side_by_side(group))
        ids = self._narrowed(group, bases[0] if bases else None)
        self._check_kind_word(group, bases[0] if bases else None)
        if (group.topic and bases and bases[0].kind is Kind.SUITE and not group.breadth
                and len(self.catalog.suites[bases[0].value]) >= BROAD_SUITE):
            raise Ask(f"{group.text!r} is a subject, not a selection",
                          options=broad_options(self.catalog, bases[0].value))
        self._check_count(group, ids)
        plain = len(group.names) == 1 and bases and bases[0].kind is not Kind.TEMPLATE
        if plain:
            suite = self._suite_of(bases[0])
            self.phrases.append(Phrase(group.names[0][1], _suite_meaning(self.catalog, suite)))
            return [suite], []
        self.phrases.append(Phrase(group.text, f"{len(ids)} template{_s(ids)}: "
                                   f"{_listed(ids)}"))
        return [], ids

    def _suite_of(self, meaning: Meaning) -> str:
        return "ultra" if meaning.kind is Kind.ALL else meaning.value

    def _narrowed(self, group: Group, base: Meaning | None) -> list[str]:
        """The group's ids: its one base (suite, template, all) narrowed by its tags."""
        if base is not None and base.kind is Kind.ALL:
            ids = list(self.catalog.suites.get("ultra") or self.catalog.templates)
        elif base is not None and base.kind is Kind.TEMPLATE:
            ids = [base.value]
        elif base is not None:
            ids = list(self.catalog.suites[base.value])
        else:
            ids = list(self.catalog.templates)
        whole = ids
        for meaning, _ in group.names:
            if meaning.kind in (Kind.TAG, Kind.QUALITY):
                ids = self._with_tag(ids, meaning)
        if not ids:
            raise Ask(f"nothing is both of {group.text!r}",
                      options=[(group.names[0][1], (), tuple(whole))] if base else [])
        return ids

    def _with_tag(self, ids: list[str], meaning: Meaning) -> list[str]:
        if meaning.kind is Kind.TAG:
            tags = [meaning.value]
        elif meaning.value == "std":  # "standard": unjudged, or standard judging in a
            tags = ["standard", "standard-judged"]  # judged suite ("portal-simjudged standard")
        else:
            tags = [QUALITY_TAGS[meaning.value]]
        for tag in tags:
            kept = [t for t in ids if tag in self.catalog.templates[t].tags]
            if kept:
                return kept
        return []

    def _check_kind_word(self, group: Group, base: Meaning | None) -> None:
        if group.kind_word is Kind.SUITE_WORD and (base is None or base.kind is Kind.TEMPLATE):
            raise Ask(f"there is no suite called {group.text!r}")
        if group.kind_word is Kind.CATEGORY_WORD and (
                base is None or base.kind is not Kind.SUITE
                or base.value not in self.catalog.categories()):
            raise Ask(f"there is no category called {group.text!r}")

    def _check_count(self, group: Group, ids: list[str]) -> None:
        if group.count is not None and group.count != len(ids):
            raise Ask(f"{group.count} was said, but {group.text!r} is {len(ids)} "
                      f"template{_s(ids)}", options=[(group.text, (), tuple(ids))])

    def _side_by_side(self, group: Group) -> list[Option]:
        options: list[Option] = []
        for meaning, phrase in group.names:
            ids = self._meaning_ids(meaning)
            if ids:
                options.append((phrase, (), tuple(ids)))
        union = tuple(dict.fromkeys(t for _, _, ids in options for t in ids))
        if len(options) > 1:
            options.append((" and ".join(label for label, _, _ in options), (), union))
        return options

    def _meaning_ids(self, meaning: Meaning) -> list[str]:
        if meaning.kind in (Kind.SUITE, Kind.ALL):
            return list(self.catalog.suites.get(self._suite_of(meaning), ()))
        if meaning.kind is Kind.TEMPLATE:
            return [meaning.value]
        if meaning.kind is Kind.FAMILY and meaning.value in FAMILIES:
            return [t for s in FAMILIES[meaning.value]["all"] for t in self.catalog.suites.get(
                s, ())]
        tag = meaning.value if meaning.kind is Kind.TAG else QUALITY_TAGS.get(meaning.value, "")
        return [t.id for t in self.catalog.templates.values() if tag and tag in t.tags]

    # --- the portal families -------------------------------------------------------------

    def _families(self, groups: list[tuple[int, Group]], named: bool) -> tuple[list[str],
                                                                                list[str]]:
        return read_families(self.catalog, groups, named, self.phrases, self.notes)

    # --- exclusions ----------------------------------------------------------------------

    def _exclusions(self, groups: list[tuple[int, Group]], result: Selection) -> list[str]:
        scope = {t for s in result.suites for t in self.catalog.suites[s]}
        scope.update(result.templates)
        excluded: list[str] = []
        for index, group in groups:
            group = self._reread(group, scope)
            if group.partial:
                ids = self._partial(group, scope, result)
            elif group.kinds() <= _FAMILY_KINDS:
                ids = family_exclusion(self.catalog, index, group, scope)
            else:
                bases = [m for m, _ in group.names if m.kind in _BASES]
                if len(bases) > 1:
                    raise Ask(f"{group.text!r} names different things side by side")
                ids = self._narrowed(group, bases[0] if bases else None)
            inside = [t for t in ids if t in scope]
            if not inside:
                raise Ask(f"{group.text!r} leaves out nothing the request names",
                          options=self._near_misses(group, ids, result))
            self._check_count(group, inside)
            excluded.extend(ids)
            self.phrases.append(Phrase(group.text, f"exclude {len(inside)} template"
                                                   f"{_s(inside)}"))
        if excluded and not scope - set(excluded):
            raise Ask("the exclusions leave out everything that was named")
        return list(dict.fromkeys(excluded))


    def _partial(self, group: Group, scope: set[str], result: Selection) -> list[str]:
        """Words of an id, excluded: the templates of the scope whose ids hold them all
        ("everything in portal-test but the unicorn one": portal_startup_unicorn)."""
        parts = {p for w in group.partial for p in re.split(r"[-_]", w) if len(p) >= 3}
        bases = [m for m, _ in group.names if m.kind in _BASES]
        within = self._narrowed(group, bases[0] if bases else None) if group.names else list(
            scope)
        found = [t for t in within if t in scope and parts and parts <= set(re.split(
            r"[-_]", t))]
        if len(found) == 1 or (found and group.plural):
            self.notes.append(f"read {group.text!r} as {', '.join(found)}, in what is named")
            return found
        self.walk.unknown.extend(group.partial)
        self.walk.parts.extend(group.partial)
        named = [t for t in _ids(self.catalog, result)[1] or [
            t for s in result.suites for t in self.catalog.suites[s]]]
        options: list[Option] = [(f"as named, without {t}", (), tuple(x for x in named if x != t))
                                 for t in found[:4]]
        raise Ask(f"I could not tell what {group.text!r} leaves out", options=[
            *options, ("as named, leaving nothing out", (), tuple(named))])

    def _near_misses(self, group: Group, ids: list[str], result: Selection) -> list[Option]:
        """An exclusion that missed: the named templates that share a rare part of the one
        it names ("portal_unicorn" out of portal-test: portal_startup_unicorn), the names
        added instead ("quick except A and full"), or nothing left out."""
        named = [t for t in _ids(self.catalog, result)[1] or [
            t for s in result.suites for t in self.catalog.suites[s]]]
        options: list[Option] = []
        if group.kinds() == {Kind.TEMPLATE}:
            parts = {p for t in ids for p in rare_parts(self.catalog, t)}
            near = [t for t in named if parts & set(rare_parts(self.catalog, t))]
            options += [(f"as named, without {t}", (), tuple(x for x in named if x != t))
                        for t in near[:4]]
        else:
            options.append((f"as named, and {group.names[0][1]} added", (),
                            tuple(dict.fromkeys([*named, *ids]))))
        return [*options, ("as named, leaving nothing out", (), tuple(named))]

    def _check_redundant(self, include: list[tuple[int, Group]]) -> None:
        """A template already inside a suite or tag named ("quick - board_meeting", "quick,
        kami_shrine") says something else: most likely that it is left out."""
        sets = [(g, set(self._meaning_ids_of(g))) for _, g in include
                if not g.kinds() & {Kind.ALL, Kind.AMBIGUOUS, Kind.QUALITY}]
        for group, ids in sets:
            if group.kinds() != {Kind.TEMPLATE}:
                continue  # "the growth ones: hiring and marketing" says which they are
            wider = [other for other, more in sets if other is not group and ids < more]
            if ids and wider:
                whole = [t for t in self._meaning_ids_of(wider[0])]
                raise Ask(f"{group.text!r} is already part of {wider[0].text!r}", options=[
                    (f"{wider[0].text} without {group.text}", (),
                     tuple(t for t in whole if t not in ids)),
                    (f"{wider[0].text}, {group.text} included", (), tuple(whole))])


def _split(catalog: Catalog, group: Group) -> list[Group]:
    """Ids written one after the other ("run full portal-simjudged") are a list."""
    if len(group.names) < 2 or not all(
            phrase in catalog.suites or phrase in catalog.templates for _, phrase in group.names):
        return [group]
    if any(m.kind is Kind.SUITE and m.value in QUALITY_TAGS for m, _ in group.names):
        return [group]  # "portal-simjudged quick": quick is the judging level there
    return [replace(group, names=[named]) for named in group.names]


def _suite_meaning(catalog: Catalog, name: str) -> str:
    return f"suite {name} ({len(catalog.suites[name])} templates)"


def _listed(ids: list[str]) -> str:
    return ", ".join(ids[:4]) + (f" and {len(ids) - 4} more" if len(ids) > 4 else "")


def _s(items: list[str]) -> str:
    return "" if len(items) == 1 else "s"

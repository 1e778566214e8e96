"""The portal families: "portal" and the founder profiles, refined by quality words.

A family is refined by the quality words anywhere in the request ("founder
profiles with simulation judging, be thorough"); named by its suite ("the portal
suite", "portal-timepoint"), or with "all", it is all of it. The plain word
"portal" could be `portal-test` (the seed's "portal templates"), the `portal` suite
or every portal template: it is asked about. "founder" alone could be the corporate
founder templates or the founder portal family: asked about too, unless a quality
or "portal" says which. In an exclusion, the reading that falls within what is
being excluded from is taken. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import replace

from controller.catalog.templates import Catalog
from controller.language.ask import Ask
from controller.language.lexicon import Kind, Meaning
from controller.language.walk import Group, Phrase
from controller.language.words import FAMILIES, QUALITY_TAGS, QUALITY_WORDS


def read_families(
    catalog: Catalog, groups: list[tuple[int, Group]], named: bool, phrases: list[Phrase],
    notes: list[str],
) -> tuple[list[str], list[str]]:
    """The suites the family groups select, and the qualities said with no family."""
    families: dict[str, bool] = {}  # family -> all of it
    qualities: list[str] = []
    founder: tuple[int, bool] | None = None
    for index, group in groups:
        wide = group.breadth or group.kind_word is Kind.SUITE_WORD
        for meaning, phrase in group.names:
            if meaning.kind is Kind.FAMILY:
                both = meaning.value == "both"
                for family in ("portal", "founders") if both else (meaning.value,):
                    families[family] = families.get(family, False) or (
                        meaning.explicit or wide or both)
                phrases.append(Phrase(phrase, _family_meaning(meaning.value)))
            elif meaning.kind is Kind.QUALITY:
                qualities.append(meaning.value)
                phrases.append(Phrase(phrase, QUALITY_WORDS[meaning.value]))
            elif meaning.value == "full":
                raise Ask(f"{phrase!r} could be the full suite or everything", index,
                          [("the full suite", [Meaning(Kind.SUITE, "full")]),
                           ("everything (ultra)", [Meaning(Kind.ALL)])])
            else:
                founder = (index, wide)
    qualities = list(dict.fromkeys(qualities))
    if "judged" in qualities and {"quick", "standard", "thorough"} & set(qualities):
        qualities.remove("judged")  # "simulation judging, be thorough": the level says which
    if founder is not None:
        if not (families or qualities):
            raise Ask("'founder' could be the corporate founder templates or the founder "
                      "portal family", founder[0], _founder_alternatives(catalog))
        families["founders"] = families.get("founders", False) or founder[1]
    if "std" in qualities and families:
        index = next(i for i, g in groups for m, _ in g.names if m.value == "std")
        raise Ask("'standard' could mean no judging or standard judging", index,
                  [("no judging", [Meaning(Kind.QUALITY, "none")]),
                   ("standard judging", [Meaning(Kind.QUALITY, "standard")])],
                  replaces=Meaning(Kind.QUALITY, "std"))
    if "founders" in families and "portal" in families and not families["portal"]:
        del families["portal"]
        notes.append("'portal' with founder profiles reads as the founder portal templates")
    if not families:
        if qualities and named:
            notes.append(f"{', '.join(QUALITY_WORDS[q] for q in qualities)}: only the portal "
                         "families have judged variants; the rest is read as named")
            return [], []
        return [], qualities
    return _family_suites(catalog, groups, families, qualities, notes), []


def _family_suites(catalog: Catalog, groups: list[tuple[int, Group]], families: dict[str, bool],
                   qualities: list[str], notes: list[str]) -> list[str]:
    suites: list[str] = []
    for family, whole in families.items():
        variants = FAMILIES[family]
        if qualities:
            picked = [s for q in qualities for s in variants[q]]
        elif whole:
            picked = list(variants["all"])
        elif family == "portal":
            index = next(i for i, g in groups for m, _ in g.names if m.kind is Kind.FAMILY)
            raise Ask("'portal' could be portal-test, the portal suite or every portal "
                      "template", index, _portal_alternatives(catalog))
        else:
            index = next(i for i, g in groups for m, _ in g.names if m.kind in (
                Kind.FAMILY, Kind.AMBIGUOUS))
            raise Ask("founder profiles alone could be their standard templates or all of "
                      "them", index, [
                          ("founder profiles: the standard founder portal templates",
                           [Meaning(Kind.FAMILY, "founders"), Meaning(Kind.QUALITY, "none")]),
                          ("every founder portal template (portal-timepoint)",
                           [Meaning(Kind.FAMILY, "founders", True)])])
        suites.extend(s for s in picked if s in catalog.suites)
    return suites


def _portal_alternatives(catalog: Catalog) -> list[tuple[str, list[Meaning]]]:
    return [
        ("portal-test, the standard portal templates", [Meaning(Kind.SUITE, "portal-test")]),
        ("the portal suite", [Meaning(Kind.FAMILY, "portal", True)]),
        ("every portal template (portal and portal-timepoint)", [Meaning(Kind.FAMILY, "both")]),
    ] if "portal-test" in catalog.suites else [
        ("the portal suite", [Meaning(Kind.FAMILY, "portal", True)])]


def _founder_alternatives(catalog: Catalog) -> list[tuple[str, list[Meaning]]]:
    family = {t for s in FAMILIES["founders"]["all"] for t in catalog.suites.get(s, ())}
    outside = sorted({t.category for t in catalog.templates.values()
                      if "founder" in t.tags and t.id not in family and t.category in
                      catalog.suites})
    return [
        *[(f"the {c} founder templates", [Meaning(Kind.SUITE, c), Meaning(Kind.TAG, "founder")])
          for c in outside],
        ("every founder portal template (portal-timepoint)",
         [Meaning(Kind.FAMILY, "founders", True)]),
        ("founder profiles: the standard founder portal templates",
         [Meaning(Kind.FAMILY, "founders")]),
    ]


def family_exclusion(catalog: Catalog, index: int, group: Group, scope: set[str]) -> list[str]:
    """The ids a family, quality or ambiguous group leaves out of `scope`.

    A group with several readings ("founder": the tag or the family; "portal": three
    sets) takes the one that falls within `scope`; if several do, differently, it asks.
    """
    readings = _exclusion_readings(group)
    if not readings:
        return _family_ids(catalog, group)
    said = group.names[0][1]
    qualities = [(m, p) for m, p in group.names if m.kind is Kind.QUALITY]
    found = [(label, meanings, _family_ids(catalog, replace(
        group, names=[(m, said) for m in meanings] + qualities)))
        for label, meanings in readings]
    inside = {frozenset(ids) & scope for _, _, ids in found} - {frozenset()}
    if len(inside) > 1:
        raise Ask(f"{group.text!r} could leave out different templates", index,
                  [(f"leaving out {label}", meanings) for label, meanings, _ in found])
    return next((ids for _, _, ids in found if set(ids) & scope), found[0][2])


def _exclusion_readings(group: Group) -> list[tuple[str, list[Meaning]]]:
    kinds = {m.kind: m for m, _ in group.names}
    if any(m.value == "std" for m, _ in group.names if m.kind is Kind.QUALITY):
        others = [m for m, _ in group.names if m.value != "std"]
        return [("the unjudged ones", [*others, Meaning(Kind.QUALITY, "none")]),
                ("the standard-judged ones", [*others, Meaning(Kind.QUALITY, "standard")])]
    if Kind.AMBIGUOUS in kinds and kinds[Kind.AMBIGUOUS].value == "founders":
        return [("the founder-tagged templates", [Meaning(Kind.TAG, "founder")]),
                ("the founder portal family", [Meaning(Kind.FAMILY, "founders", True)])]
    if Kind.AMBIGUOUS in kinds:
        return [("the full suite", [Meaning(Kind.SUITE, "full")]),
                ("everything", [Meaning(Kind.ALL)])]
    portal = kinds.get(Kind.FAMILY)
    if set(kinds) == {Kind.FAMILY} and portal and portal.value == "portal" and not (
            portal.explicit or group.breadth or group.kind_word is Kind.SUITE_WORD):
        return [("portal-test", [Meaning(Kind.SUITE, "portal-test")]),
                ("the portal suite", [Meaning(Kind.FAMILY, "portal", True)]),
                ("every portal template", [Meaning(Kind.FAMILY, "both")])]
    return []


def _family_ids(catalog: Catalog, group: Group) -> list[str]:
    families, qualities, base = [], [], None
    for meaning, _ in group.names:
        if meaning.kind is Kind.FAMILY:
            families += ["portal", "founders"] if meaning.value == "both" else [meaning.value]
        elif meaning.kind is Kind.QUALITY:
            qualities.append(meaning.value)
        elif meaning.kind in (Kind.SUITE, Kind.ALL):
            base = list(catalog.suites.get(meaning.value or "ultra", ()))
        elif meaning.kind is Kind.TAG:
            base = [t.id for t in catalog.templates.values() if meaning.value in t.tags]
    if "judged" in qualities and len(qualities) > 1:
        qualities.remove("judged")
    tags = {QUALITY_TAGS[q] for q in qualities}
    if base is not None:
        return [t for t in base if not tags or tags & set(catalog.templates[t].tags)]
    if not families:
        return [t.id for t in catalog.templates.values() if tags & set(t.tags)]
    picked = [s for f in families for q in (qualities or ["all"]) for s in FAMILIES[f][q]]
    return list(dict.fromkeys(t for s in picked for t in catalog.suites.get(s, ())))


def _family_meaning(family: str) -> str:
    if family == "founders":
        return "founder profiles: the portal-timepoint templates"
    if family == "both":
        return "both portal families"
    return "portal templates"

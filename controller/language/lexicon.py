"""The words the principal knows: the catalog's names and the seed's vocabulary.

Every entry is a sequence of whole words (tokens) with one `Meaning`. The
catalog gives suite names, categories, template ids and tags, each as written
("portal-simjudged-quick", "board_meeting") and as spoken ("portal simjudged
quick", "board meeting"). The seed's "Natural Language Interface" table gives
the rest: founder profiles, simulation judging, be thorough, fast and dirty,
stay cheap, run fast, everything... A suite name wins over a template id, and
both win over a tag, when they are spelled the same.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from controller.catalog.templates import Catalog


class Kind(StrEnum):
    SUITE = "suite"
    TEMPLATE = "template"
    TAG = "tag"
    FAMILY = "family"  # portal / founders: refined by a quality word
    ALL = "all"
    BREADTH = "breadth"  # "all", "every", "suite": the whole of what is named
    QUALITY = "quality"
    PRIORITY = "priority"
    INTENT = "intent"
    EXCLUDE = "exclude"
    FILLER = "filler"


@dataclass(frozen=True)
class Meaning:
    kind: Kind
    value: str = ""
    explicit: bool = False  # a family named by its exact suite name


# Families: the portal modes whose variants differ by simulation judging. Each quality
# names the suites it selects; suites missing from a catalog are skipped.
FAMILIES: dict[str, dict[str, tuple[str, ...]]] = {
    "portal": {
        "all": ("portal",),
        "none": ("portal-test",),
        "quick": ("portal-simjudged-quick",),
        "standard": ("portal-simjudged-standard",),
        "thorough": ("portal-simjudged-thorough",),
        "judged": ("portal-simjudged",),
    },
    "founders": {
        "all": ("portal-timepoint",),
        "none": ("portal-timepoint-standard",),
        "quick": ("portal-timepoint-simjudged-quick",),
        "standard": ("portal-timepoint-simjudged",),
        "thorough": ("portal-timepoint-simjudged-thorough",),
        "judged": (
            "portal-timepoint-simjudged-quick",
            "portal-timepoint-simjudged",
            "portal-timepoint-simjudged-thorough",
        ),
    },
}
# Excluding a quality ("but not the thorough ones") excludes the templates with this tag.
QUALITY_TAGS = {
    "thorough": "thorough",
    "quick": "quick-judged",
    "standard": "standard-judged",
    "judged": "judged",
    "none": "standard",
}
QUALITY_WORDS = {
    "thorough": "thorough (thorough simulation-judged variants)",
    "quick": "quick simulation judging",
    "standard": "standard simulation judging",
    "judged": "simulation-judged variants",
    "none": "no simulation judging",
}

_SEED_WORDS: dict[str, Meaning] = {}


def _words(meaning: Meaning, *phrases: str) -> None:
    for phrase in phrases:
        _SEED_WORDS[phrase] = meaning


_words(Meaning(Kind.FAMILY, "founders"), "founder profiles", "founder profile", "founders",
       "founder", "real founders", "founder portal", "timepoint portal", "portal timepoint",
       "founder templates", "real founder profiles", "sean and ken")
_words(Meaning(Kind.FAMILY, "portal"), "portal", "portal mode", "portal modes",
       "portal templates")
_words(Meaning(Kind.ALL), "everything", "ultra", "all templates", "all of them",
       "the whole catalog", "the entire catalog", "whole catalog", "entire catalog",
       "complete coverage", "full coverage", "every template", "all 64", "all sixty-four")
_words(Meaning(Kind.QUALITY, "thorough"), "thorough", "be thorough", "thoroughly",
       "best quality", "highest quality", "maximum fidelity", "max fidelity", "max quality",
       "maximum quality", "high quality", "top quality", "in depth", "in-depth",
       "thorough judging", "thoroughly judged", "most thorough")
_words(Meaning(Kind.QUALITY, "judged"), "simulation judging", "simulation judged",
       "simulation-judged", "simjudged", "sim-judged", "sim judged", "judged", "judging",
       "with judging", "judges", "judge", "with judges", "judged ones")
_words(Meaning(Kind.QUALITY, "quick"), "quick judging", "quick judged", "quick-judged",
       "light judging", "lightweight judging", "lightly judged", "quick judges",
       "lightweight simulation judging", "quick simulation judging")
_words(Meaning(Kind.QUALITY, "standard"), "standard judging", "standard judged",
       "standard-judged", "standard simulation judging")
_words(Meaning(Kind.QUALITY, "none"), "fast and dirty", "quick and dirty", "no judging",
       "without judging", "without simulation judging", "skip judging", "skip the judging",
       "unjudged", "no judges", "standard", "standard only", "no simulation judging",
       "without the judging", "without judges")
_words(Meaning(Kind.PRIORITY, "cost"), "stay cheap", "cheap", "cheaply", "cheapest",
       "save money", "saving money", "low cost", "frugal", "cost priority", "prioritize cost",
       "minimize cost", "minimise cost", "lowest cost", "on a budget", "don't overspend",
       "do not overspend", "keep it cheap", "keep costs down", "cost-optimized",
       "cost optimized", "inexpensive", "economical", "ci/cd", "ci")
_words(Meaning(Kind.PRIORITY, "speed"), "fast", "run fast", "quickly", "asap",
       "as fast as possible", "as soon as possible", "speed", "speed priority", "hurry",
       "max parallelism", "maximum parallelism", "urgent", "urgently", "rapidly", "fastest",
       "cost doesn't matter", "cost does not matter", "money is no object", "go fast",
       "prioritize speed", "full speed")
_words(Meaning(Kind.PRIORITY, "balanced"), "balanced", "balance", "reasonable speed",
       "balanced strategy", "middle ground")
_words(Meaning(Kind.INTENT, "run"), "run", "start", "launch", "execute", "go", "kick off",
       "test", "try", "fire", "fire off", "begin", "running", "let's run", "lets run")
_words(Meaning(Kind.INTENT, "plan"), "plan", "estimate", "how much would", "what would",
       "dry run", "dry-run", "preview", "quote", "price", "show me a plan", "what if",
       "how long would", "propose", "suggest", "recommend", "what does", "how much does",
       "how much is", "how much for", "what would it cost")
_words(Meaning(Kind.BREADTH), "all", "every", "whole", "entire", "suite", "complete",
       "all the", "each", "full set", "all of the")
_words(Meaning(Kind.EXCLUDE), "but not", "except", "except for", "excluding", "without",
       "minus", "not", "skip", "skipping", "leave out", "leaving out", "other than",
       "apart from", "no", "but without", "but skip", "omit", "omitting", "exclude",
       "but no", "besides", "but leave out", "and not", "nor")
_FILLER = """
please the a an and or with for of to me i we us want need would like just only some my
our templates template suites simulations simulation sims scenarios scenario ones one
modes mode variants variant also plus then on in at it them this that be is are can
you could let's lets now validation check checks analysis profiles profile set batch
all-in quality under below within max maximum budget budgets up usd dollars cost costs
money time parallel overall total run's too as well kindly thanks thank good great ok
okay sure hey hi hello ensure make sure using use via by from get give coverage
pipeline my our their those these its real portal-mode bit fine do's do
stay but keep so
"""
_words(Meaning(Kind.FILLER), *_FILLER.split())

_TOKEN = re.compile(r"[a-z0-9$]+(?:['\u2019/-][a-z0-9]+|_[a-z0-9]+)*|[,;.!?]")


def tokenize(text: str) -> list[tuple[str, int, int]]:
    """Lowercase words (ids with `_`/`-` kept whole) and punctuation, with their spans."""
    return [(m.group(0).replace("\u2019", "'"), m.start(), m.end()) for m in _TOKEN.finditer(text)]


@dataclass(frozen=True)
class Lexicon:
    """Token sequences to meanings; `longest` is the longest sequence, for matching."""

    entries: dict[tuple[str, ...], Meaning]
    longest: int

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


def _spellings(name: str) -> list[tuple[str, ...]]:
    """A name as written, with the other separator, and as separate words."""
    words = tuple(w for w in re.split(r"[-_]", name) if w)
    return [(name,), (name.replace("_", "-"),), (name.replace("-", "_"),), words]


_CACHE: dict[int, tuple[Catalog, Lexicon]] = {}


def lexicon_for(catalog: Catalog) -> Lexicon:
    """The lexicon of a catalog (cached: catalogs are immutable once loaded)."""
    cached = _CACHE.get(id(catalog))
    if cached is not None and cached[0] is catalog:
        return cached[1]
    entries: dict[tuple[str, ...], Meaning] = {}
    family_suites = {spec["all"][0]: family for family, spec in FAMILIES.items()}
    tags = {tag for t in catalog.templates.values() for tag in t.tags}
    for tag in sorted(tags - set(QUALITY_TAGS.values()) - {"judged"}):
        for key in _spellings(tag):
            entries[key] = Meaning(Kind.TAG, tag)
    for phrase, meaning in _SEED_WORDS.items():
        entries[tuple(phrase.split())] = meaning
    for template_id in catalog.templates:
        for key in _spellings(template_id):
            entries[key] = Meaning(Kind.TEMPLATE, template_id)
    for name in catalog.suites:
        for key in _spellings(name):
            if name in family_suites:
                # "portal-timepoint" names the whole suite; the plain word "portal" is
                # the seed's "portal templates", refined by quality words.
                exact = key == (name,) and "-" in name
                entries[key] = Meaning(Kind.FAMILY, family_suites[name], exact)
            elif name == "ultra":
                entries[key] = Meaning(Kind.ALL)
            else:
                entries[key] = Meaning(Kind.SUITE, name)
    lexicon = Lexicon(entries, max(len(k) for k in entries))
    if len(_CACHE) > 16:
        _CACHE.clear()
    _CACHE[id(catalog)] = (catalog, lexicon)
    return lexicon

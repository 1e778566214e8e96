"""The word walk: a request's words, longest known phrase first, into groups and modifiers.

A group is the names said together ("the portal-timepoint thorough ones": a family
and a quality; "corporate founder templates": a suite and a tag), with what stands
before it: an exclusion cue ("except", "without", "leave ... out"), a breadth word
("all", "the rest of") or a count ("the two vc pitch ones"). Groups are joined by
"and", "plus", commas; an exclusion goes on over "and" and over a comma followed by
another name, and ends at anything else. Modifiers (priorities, "run"/"plan") are
collected as they come. Words the lexicon does not know are kept: in an exclusion, or
in the clause of a name, they make the reading ask (`asks`), elsewhere they are listed
as not understood. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.language.lexicon import BOUNDARY, NAMES, Kind, Lexicon, Meaning, tokenize

CLAUSE_ENDS = frozenset(",;:.!?|-()/" + BOUNDARY)
_SKIPPED = frozenset({Kind.FILLER, Kind.NOUN})


@dataclass(frozen=True)
class Phrase:
    text: str
    meaning: str


@dataclass
class Group:
    """Names said together, and what stands before and after them."""

    names: list[tuple[Meaning, str]] = field(default_factory=list)
    exclude: bool = False
    cue: str = ""
    breadth: bool = False
    count: int | None = None
    kind_word: Kind | None = None  # "suite" or "category" said after the names
    topic: bool = False  # "corporate analysis": a subject, not a selection
    partial: list[str] = field(default_factory=list)  # words of an id ("the unicorn one")
    plural: bool = False  # "ones", "templates" said after it

    @property
    def text(self) -> str:
        said = " ".join([*(phrase for _, phrase in self.names), *self.partial])
        return f"{self.cue} {said}" if self.cue else said

    def kinds(self) -> set[Kind]:
        return {meaning.kind for meaning, _ in self.names}


@dataclass
class Walk:
    """What the word walk collected, before it is resolved against the catalog."""

    groups: list[Group] = field(default_factory=list)
    priorities: list[str] = field(default_factory=list)
    intent: str | None = None
    phrases: list[Phrase] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    numbers: dict[str, list[float]] = field(default_factory=dict)
    asks: list[str] = field(default_factory=list)  # why the reading must ask
    unread: list[str] = field(default_factory=list)  # words that made it ask
    either: bool = False  # "A or B": which one is asked
    parts: list[str] = field(default_factory=list)  # words read as parts of ids, in scope


@dataclass
class _Item:
    meaning: Meaning | None  # None: a word not known, or punctuation
    word: str
    phrase: str

    @property
    def kind(self) -> Kind | None:
        return self.meaning.kind if self.meaning else None

    @property
    def punctuation(self) -> bool:
        return self.meaning is None and self.word in CLAUSE_ENDS | {"+", "&"}


def items_of(lexicon: Lexicon, text: str) -> list[_Item]:
    """The text's words matched to the lexicon, longest phrase first."""
    tokens = tokenize(text)
    words = [t[0] for t in tokens]
    items: list[_Item] = []
    at = 0
    while at < len(words):
        found = lexicon.match(words, at)
        if found is None:
            items.append(_Item(None, words[at], words[at]))
            at += 1
            continue
        size, meaning = found
        items.append(_Item(meaning, words[at], text[tokens[at][1] : tokens[at + size - 1][2]]))
        at += size
    return items


class _Walker:
    def __init__(self, items: list[_Item], walk: Walk) -> None:
        self.items, self.walk = items, walk
        self.group: Group | None = None
        self.excluding: str | None = None  # the exclusion cue in force
        self.excluded_any = False
        self.leave = False  # "leave X out": waiting for "out"
        self.breadth = False
        self.count: tuple[int, str] | None = None
        self.clause_names = False
        self.clause_unknown: list[str] = []

    def next_kind(self, at: int) -> Kind | str | None:
        """The kind of the next item that is not a filler word ("unknown" for a word)."""
        for item in self.items[at + 1 :]:
            if item.punctuation:
                return "punctuation"
            if item.meaning is None:
                return "unknown"
            if item.kind not in _SKIPPED:
                return item.kind
        return None

    def run(self) -> None:
        for at, item in enumerate(self.items):
            if item.punctuation:
                self.punctuation(at, item)
            elif item.meaning is None:
                self.unknown(item)
            elif item.kind in NAMES:
                self.name(item)
            else:
                self.other(at, item)
        self.end_clause()
        self.end_exclusion()

    def punctuation(self, at: int, item: _Item) -> None:
        self.group = None
        going_on = item.word in ",+&/" and self.next_kind(at) in NAMES
        if item.word in "+&" or (going_on and self.excluding):
            return
        self.end_exclusion()
        self.end_clause()

    def unknown(self, item: _Item) -> None:
        word = item.word
        if word.replace(".", "").isdigit() and self.count is None:
            self.count = (int(float(word)), word)
            self.group = None
            return
        if self.excluding is not None:  # maybe part of a name: read within what is excluded
            if self.group is None:
                self.group = Group(exclude=True, cue=self.excluding)
                self.walk.groups.append(self.group)
            self.group.partial.append(word)
            self.excluded_any = True
            return
        self.walk.unknown.append(word)
        self.clause_unknown.append(word)

    def name(self, item: _Item) -> None:
        assert item.meaning is not None
        if self.group is None:
            self.group = Group(exclude=self.excluding is not None, cue=self.excluding or "",
                               breadth=self.breadth)
            if self.count is not None:
                self.group.count = self.count[0]
                self.count = None
            self.breadth = False
            self.walk.groups.append(self.group)
        self.group.names.append((item.meaning, item.phrase))
        self.clause_names = True
        self.excluded_any = self.excluded_any or self.excluding is not None

    def other(self, at: int, item: _Item) -> None:
        kind, meaning = item.kind, item.meaning
        assert meaning is not None
        if kind in _SKIPPED:
            if (item.word in ("from", "of") and self.excluding is not None
                    and self.excluded_any and self.next_kind(at) in NAMES):
                self.end_exclusion()  # "drop X from corporate": corporate is what is run
                self.group = None
                return
            if kind is Kind.NOUN and self.group is None and self.clause_unknown:
                self.ask("it describes templates in words I do not know", *self.clause_unknown)
            if kind is Kind.NOUN and self.group is not None and item.word.endswith("s"):
                self.group.plural = True
            if item.word == "out" and self.leave:
                self.end_exclusion()
                self.group = None
            return
        if kind in (Kind.SUITE_WORD, Kind.CATEGORY_WORD, Kind.TOPIC):
            if self.group is not None:
                if kind is Kind.TOPIC:
                    self.group.topic = True
                else:
                    self.group.kind_word = kind
            return
        if kind is Kind.PRONOUN:
            self.pronoun(at, meaning, item)
            return
        if kind is Kind.COUNT and item.word == "one" and self.group is not None:
            return  # "the historical one": a noun after a name, not a count
        self.group = None
        if kind is Kind.COUNT:
            self.count = (int(meaning.value), item.phrase)
        elif kind is Kind.UNION:
            pass  # an exclusion goes on: "except A and B"
        elif kind is Kind.OR:
            self.walk.either = True
        elif kind is Kind.BREADTH:
            self.breadth = True
            self.walk.phrases.append(Phrase(item.phrase, "all of what is named"))
        elif kind is Kind.EXCLUDE:
            self.exclude(at, meaning, item)
        elif kind is Kind.LEAVE:
            self.end_exclusion()
            self.excluding, self.excluded_any, self.leave = item.phrase, False, True
        else:
            self.end_exclusion()
            self.modifier(meaning, item.phrase)

    def pronoun(self, at: int, meaning: Meaning, item: _Item) -> None:
        following = [i for i in self.items[at + 1 : at + 6] if i.kind is not Kind.FILLER
                     or i.word in ("in", "of", "from", "within")]
        if (len(following) >= 2 and following[0].word in ("in", "of", "from", "within")
                and following[1].kind in NAMES):
            return  # "those in corporate", "whatever is in corporate": corporate is named
        if self.excluding is not None and not self.excluded_any:
            self.ask(f"{self.excluding!r} does not say what it leaves out", item.phrase)
            self.excluded_any = True
        elif item.phrase in ("the rest", "the others", "the other ones") and any(
                g.exclude for g in self.walk.groups):
            return  # "skip X and run the rest": what the exclusion leaves
        elif meaning.value == "reference" and self.excluding is None:
            self.ask("it points at something the request does not name", item.phrase)

    def exclude(self, at: int, meaning: Meaning, item: _Item) -> None:
        follows = self.next_kind(at)
        if meaning.value == "maybe" and follows not in NAMES and follows != "unknown":
            return  # "no rush", "not in a hurry": not an exclusion
        scoped = bool(self.walk.groups) and (self.walk.groups[-1].breadth or any(
            m.kind is Kind.ALL for m, _ in self.walk.groups[-1].names))
        if meaning.value == "but" and follows not in NAMES and not (
                follows == "unknown" and scoped):  # "everything in X but the unicorn one"
            self.end_exclusion()
            return  # "skip X but run the rest": the exclusion ends
        if self.excluding is not None and not self.excluded_any:
            cue = f"{self.excluding} {item.phrase}"  # "everything but not X": one cue
        else:
            self.end_exclusion()
            cue = item.phrase
        if meaning.value == "all":  # "everything but X"
            self.walk.groups.append(Group(names=[(Meaning(Kind.ALL), item.phrase.split()[0])]))
        self.excluding, self.excluded_any, self.leave = cue, False, False

    def modifier(self, meaning: Meaning, phrase: str) -> None:
        if meaning.kind is Kind.PRIORITY:
            self.walk.priorities.append(meaning.value)
            self.walk.phrases.append(Phrase(phrase, f"priority {meaning.value}"))
        elif meaning.kind is Kind.INTENT:
            self.walk.intent = self.walk.intent or meaning.value
            self.walk.phrases.append(
                Phrase(phrase, "start a run" if meaning.value == "run" else "plan only"))

    def end_exclusion(self) -> None:
        if self.excluding is not None and not self.excluded_any:
            self.ask(f"{self.excluding!r} is not followed by anything I know", self.excluding)
        self.excluding, self.excluded_any, self.leave = None, False, False

    def end_clause(self) -> None:
        if self.count is not None:
            word = self.count[1]
            self.walk.unknown.append(word)
            self.clause_unknown.append(word)
            self.walk.notes.append(
                f"{word!r} has no unit: say ${word} for money, '{word} at a time' for "
                f"parallelism or '{word} minutes' for time")
            self.count = None
        if self.clause_unknown and self.clause_names:
            self.ask("some words next to what it names were not understood",
                     *self.clause_unknown)
        self.clause_names, self.clause_unknown = False, []
        self.breadth = False

    def ask(self, why: str, *words: str) -> None:
        if why not in self.walk.asks:
            self.walk.asks.append(why)
        self.walk.unread.extend(w for w in words if w not in self.walk.unread)


def walk_words(lexicon: Lexicon, text: str, walk: Walk) -> None:
    """Walk the (number-masked) text into `walk`'s groups, modifiers and unknown words."""
    _Walker(items_of(lexicon, text), walk).run()

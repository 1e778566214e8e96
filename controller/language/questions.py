"""Questions about runs, told from requests and read into a kind and a subject. Pure.

Kinds: `run_cost` (what a run cost), `template_cost` (a template's cost over its
runs), `most_expensive`, `failures` (what failed and why), `least_reliable`,
`compare_runs` (a run against the previous one of the same request), `waiting` (what
is pending and why), `status`, `tokens`, and `cancel`. The subject is a run id, a
template, or a run pointed at in words ("the last run": `last`, "the run before
last": `previous`). A request is never a question: a text that asks to run something
("run quick and tell me the cost", "could you run corporate and tell me how much it
spent afterwards?") is read as a request, and a price asked of something not run yet
("what does ultra cost?") is a plan.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from controller.catalog.templates import Catalog
from controller.language.asides import normalise
from controller.language.grammar import spell
from controller.language.lexicon import Kind, lexicon_for
from controller.language.walk import items_of

RUN_ID = re.compile(r"(?<![\w-])(run-[0-9a-f]{4,16})(?![\w-])")
_POLITE = (r"(?:(?:please|pls|kindly|hey|hi|hello|ok|okay|so|now|just|then|and|also|sorry|"
           r"can you|could you|would you|will you|can u|could u|i want to|i'd like to|"
           r"i would like to|we need to|i need to|let's|lets|go ahead and|time to)[\s,!]+)*")
_VERB = (r"(?:run|re-?run|start|launch|kick(?:ing)? off|kick|fire(?: off| up)?|execute|spin up|"
         r"test|try|queue(?: up)?|trigger|plan|estimate|preview|quote|smoke|"
         r"do(?!\s+(?:we|you|i|they|any|all|those|these)\b)|"
         r"give(?=.*\b(?:a|another)\s+(?:go|run|spin|try|shot)\b)|"
         r"get(?=.*\b(?:going|running|started)\b))\b"
         r"(?=\s+[\w$])")  # a request says what: "queue?" alone is a question
_REQUEST = re.compile(
    rf"^\s*{_POLITE}{_VERB}(?!-)|\b(?:could|can|would|will) (?:you|u) (?:please |pls )?"
    rf"(?:run|re-?run|start|launch|kick off|fire off|spin up|execute)\b|\bplease (?:run|start|"
    rf"launch|kick off|rerun)\b|\b(?:i|we) (?:want|need|'d like|would like) (?:you )?to "
    rf"(?:run|start|launch|kick off)\b|\blet'?s (?:run|start|get|kick)\b|\bso (?:please )?run\b"
)
_CANCEL = re.compile(r"^\s*(?:please\s+)?(?:cancel|stop|abort|kill|halt)\b")
_KINDS = (
    ("tokens", r"\btokens?\b|\btoken (?:count|usage|spend)\b"),
    ("compare_runs", r"\bcompar(?:e|ed|ing|ison)\b|\bdiff\b|\bversus\b|\bvs\.?(?!\w)|"
     r"\b(?:better|worse|cheaper|faster|slower|costlier|more expensive)(?: or (?:better|worse))?"
     r" than\b|\bbetter or worse\b|\bagainst (?:the )?(?:previous|last|prior)\b|"
     r"\bdifferen(?:t|ce)s? (?:from|to|with|between)\b|\bwhat(?:'s| has| is)? (?:changed|"
     r"different)\b|\bchanged since\b|\bimprov(?:ed|ement|ing)\b|\bregress(?:ed|ions?)?\b|"
     r"\blast two runs\b|\bgetting (?:better|worse)\b|\b(?:trend|trending)\b(?! for)"),
    ("least_reliable", r"\bflak(?:y|iest|iness|ing|es)\b|\b(?:least |most un|less )reliable\b|"
     r"\bunreliable\b|\breliab(?:le|ility)\b|\b(?:error|failure|crash)[- ]prone\b|"
     r"\bkeeps? (?:failing|breaking|crashing)\b|"
     r"\b(?:fail|break|crash)(?:s|es)? (?:the )?(?:most|more|a lot|repeatedly|regularly)\b|"
     r"\b(?:fail|break|crash)(?:s|es)? (?:most |more |the most )?often\b|\boften fail\b|"
     r"\b(?:worst|lowest) (?:success|pass) rates?\b|\bfailure rates?\b|\bmost failures\b|"
     r"\bsucceeds? (?:the )?least\b|\bleast (?:often )?succe|\b(?:least |less |un)stable\b|"
     r"\bworry about\b|\btrouble ?makers?\b|\bproblem (?:templates|sims|children)\b"),
    ("most_expensive", r"\bpriciest\b|\bcostliest\b|\bmost (?:expensive|costly)\b|"
     r"\b(?:burn|cost|spend|eat|use|spent|burned|used)(?:s)? (?:us |me |you )?(?:the )?most\b|"
     r"\bmost (?:money|cost|spend)\b|\beating (?:the|our|my|up the|up our) (?:budget|money)\b|"
     r"\b(?:rank|sort|list|order)\b.*\bby (?:cost|spend|price|money)\b|"
     r"\b(?:top|biggest|largest) (?:\d+ )?(?:spenders?|costs?|expenses)\b|"
     r"\b(?:cost|spend|spending|money)\b.*\b(?:by|per) (?:template|sim|simulation)\b|"
     r"\b(?:costing|charging) (?:us |me )?(?:the )?most\b|\bbreakdown\b|"
     r"\bexpensive ones\b|\bwhere (?:is|does|did) (?:the |our |all the )?money go"),
    ("waiting", r"\bwaiting\b|\bpending\b|\bqueued\b|\bqueue\b|\bbacklog\b|"
     r"\b(?:so long|forever|ages) to (?:start|launch|begin|get going)\b|"
     r"\bstuck\b|\bon hold\b|\bheld\b|\bblock(?:ed|ing|s)?\b|\bholding (?:\w+ )?up\b|"
     r"\bwhy is nothing\b|\bnothing (?:is )?(?:running|starting)\b|"
     r"\b(?:hasn't|has not|haven't|have not|didn't|did not|isn't|is not|aren't|are not|not|"
     r"won't|yet to)\b[^.?!]*\b(?:start(?:ed|ing)?|launch(?:ed|ing)?|begun|begin|running)\b"
     r"(?! ok)"),
    ("failures", r"\bfail(?:ed|ing|ures?|s)?\b|\b(?:went|go|gone|going) wrong\b|\bbroke\b|"
     r"\bbroken\b|\berror(?:s|ed)?\b|\bcrash(?:ed|es)?\b|\btime(?:d)? ?outs?\b|"
     r"\btimed out\b|\booms?\b|\bout of memory\b|\bexit(?:ed)? (?:codes?|with)\b|"
     r"\bdie[sd]?\b|\bdead\b|\bkill(?:ed|s)?\b|\b(?:didn't|did not|doesn't|does not|won't)"
     r" (?:work|finish|complete|pass|succeed)\b|\bdid (?:everything|it all|they all|all of them)"
     r" pass\b|\b(?:not|never) (?:finish|complete|pass)(?:ed)?\b"),
    ("cost", r"\bcosts?\b|\bcosting\b|\bspen[dt]\b|\bspending\b|\bburn(?:ed|t)?\b|\bdamage\b|"
     r"\bexpensive\b|\bmoney\b|\bbill\b|\bpricey\b|\bhow much\b(?! longer| more| time)|"
     r"\b(?:over|under|within|on) (?:the )?budget\b|\bbudget (?:left|remaining)\b"),
    ("status", r"\bstatus\b|\bprogress\b|\bhow(?:'s| is| are|s)\b.*\b(?:doing|going|coming along|"
     r"getting on|progressing|looking)\b|\b(?:is|are|has|have|did)\b.*\b(?:done|finished|"
     r"complete(?:d)?|over|ended|succeed(?:ed)?|still (?:running|going))\b|"
     r"\b(?:anything|any|what(?:'s| is| are)?)\b.*\b(?:running|active|in progress|going on)\b|"
     r"\bhow (?:much )?longer\b|\beta\b|\bhow far\b|\bwhere (?:is|are|were)\b.*\bat\b|"
     r"\bany news\b|\bupdate on\b|\bdid\b.*\brun (?:ok|okay|fine|well|through)\b|"
     r"\bwhat(?:'s| has)? happen(?:ed|ing)\b|^\s*(?:list|show)(?: me)?(?: the)? runs\b|"
     r"\bactive runs\b|\bhow long (?:until|till|before|left|to go)\b|\bwhen will\b.*"
     r"\b(?:finish|be done|end|complete)\b|\bhow many\b.*\b(?:done|left|remaining|finished|"
     r"running|to go)\b|\b(?:left|remaining) to (?:run|go)\b|\bare we done\b|"
     r"\bstate of (?:things|the run|play|affairs)\b|\bhow have\b.*\bgone\b"),
)
_KIND_PATTERNS = tuple((kind, re.compile(pattern)) for kind, pattern in _KINDS)
# A cost asked of something not run yet is a price, for a plan: "what would quick cost?",
# "how much to run full?". Any other cost question is about runs.
_PRICE = re.compile(r"\b(?:would|will|gonna|going to|to run|if (?:i|we|you) run|estimate[ds]?|"
                    r"quote)\b")
_PAST = re.compile(r"\b(?:did|has|have|had|spent|burned|burnt|so far|to date|yesterday|today|"
                   r"this week|this month|last week|last month|ago|in total|on average)\b")
_LAST = re.compile(r"\b(?:last|latest|current|most recent|newest|ongoing|running) run\b|"
                   r"\bthis run\b|\bthe run that (?:just )?(?:finished|ran|ended)\b")
_PREVIOUS = re.compile(r"\b(?:previous|prior|penultimate|second to last|last but one) run\b|"
                       r"\brun before (?:the )?last\b|\bthe one before (?:the )?last\b|"
                       r"\bbefore last\b|\brun before (?:this|the current|the latest)(?: one)?\b")
_SINCE = (("today", r"\btoday\b"), ("yesterday", r"\byesterday'?s?\b"),
          ("week", r"\b(?:this|last|past) week\b"), ("month", r"\b(?:this|last|past) month\b"))
_SINCE_PATTERNS = tuple((name, re.compile(p)) for name, p in _SINCE)


@dataclass(frozen=True)
class Question:
    """What a question asks: its kind, and about which run, template or time."""

    kind: str
    run_id: str | None = None
    templates: tuple[str, ...] = ()
    which: str | None = None  # "last" | "previous": a run pointed at in words
    since: str | None = None  # today | yesterday | week | month

    @property
    def subject(self) -> str | None:
        """The run id, the one template, or `last`/`previous`; None for everything."""
        if self.run_id:
            return self.run_id
        if len(self.templates) == 1:
            return self.templates[0]
        return self.which


def recognise(catalog: Catalog, text: str) -> Question | None:
    """The question `text` asks, or None when it is a request (or not about runs)."""
    lowered = spell(catalog, normalise(text[:2000]))
    found = RUN_ID.search(lowered)
    run_id = found.group(1) if found else None
    if _CANCEL.search(lowered):
        return Question("cancel", run_id)
    if _REQUEST.search(lowered):
        return None
    kind = next((k for k, pattern in _KIND_PATTERNS if pattern.search(lowered)), None)
    if kind is None:
        return None
    templates = named_templates(catalog, RUN_ID.sub(" ", lowered))
    which = _which(lowered, kind)
    if kind == "cost":
        if _PRICE.search(lowered) or (not (templates or run_id or which or _PAST.search(
                lowered)) and names_a_set(catalog, RUN_ID.sub(" ", lowered))):
            return None  # a price, for the planner: "what does ultra cost?"
        kind = "template_cost" if templates and not (run_id or which) else "run_cost"
    if kind == "least_reliable" and len(templates) == 1:
        kind = "failures"  # "is kami_shrine reliable?": its failures, over its runs
    if kind in ("most_expensive", "least_reliable", "compare_runs") or run_id or which:
        templates = ()
    since = next((name for name, pattern in _SINCE_PATTERNS if pattern.search(lowered)), None)
    return Question(kind, run_id, templates, which, since)


def _which(text: str, kind: str) -> str | None:
    """A run pointed at in words; comparing, the run compared ("this run"), not its match."""
    if kind == "compare_runs":
        return "last" if re.search(r"\bthis run\b|\b(?:current|latest|newest) run\b", text) \
            else None
    if _PREVIOUS.search(text):
        return "previous"
    return "last" if _LAST.search(text) else None


def names_a_set(catalog: Catalog, text: str) -> bool:
    """Whether `text` names a suite, a tag or a family (something a plan could price)."""
    kinds = {Kind.SUITE, Kind.TAG, Kind.FAMILY, Kind.ALL, Kind.AMBIGUOUS}
    return any(i.meaning and i.meaning.kind in kinds
               for i in items_of(lexicon_for(catalog), spell(catalog, text)))


def named_templates(catalog: Catalog, text: str) -> tuple[str, ...]:
    """The template ids `text` names, written or spoken (a slip of one letter read as it)."""
    items = items_of(lexicon_for(catalog), spell(catalog, text))
    return tuple(dict.fromkeys(i.meaning.value for i in items
                               if i.meaning and i.meaning.kind is Kind.TEMPLATE))

"""The principal's own words (not the catalog's): what each phrase means, as plain tables.

The seed's "Natural Language Interface" table and the phrasings operators use:
quality words that refine the portal families, priorities, the verbs that ask to
run or only to plan, the cues of an exclusion, words that widen a name to all of
it, and the small words a request is read past (politeness, articles, the nouns
that only say "templates"). Every phrase here is lowercase words separated by one
space; `lexicon` turns them into token sequences. A word missing from every table
is not understood, and a word not understood near a name makes the principal ask.
"""

from __future__ import annotations

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
    "std": "standard",
}
QUALITY_WORDS = {
    "thorough": "thorough (thorough simulation-judged variants)",
    "quick": "quick simulation judging",
    "standard": "standard simulation judging",
    "judged": "simulation-judged variants",
    "none": "no simulation judging",
    "std": "standard (no judging, or standard judging)",
}

# Kind of meaning -> value -> phrases. Values: a family, a quality, a priority, an intent.
FAMILY_PHRASES = {
    # The founder portal family, named so that it cannot be the corporate founder tag.
    "founders": """founder profiles | founder profile | real founders | founder portal |
        timepoint portal | real founder profiles | sean and ken | founder portal templates |
        portal founders | founders portal""",
    "portal": "portal | portal mode | portal modes | portal templates | portal sims",
    "both": """both portal families | both families | both portal modes | both portals |
        both portal suites | both of the portal families""",
}
# Words that name two different sets; read by what is around them, else asked about.
AMBIGUOUS = {
    "founders": "founder | founders",  # the corporate founder tag or the founder portal family
    "full": """a full run | the full run | a full pass | the full pass | a full sweep |
        the full thing | do a full run""",  # the full suite or everything
}
ALL_PHRASES = {
    "": """everything | ultra | all templates | the whole catalog | the entire catalog |
        whole catalog | entire catalog | complete coverage | full coverage | every template |
        all 64 | all sixty-four | the whole thing | the entire thing | every single template |
        all the templates | all sims | all the sims | every sim | all simulations |
        every simulation | the lot | the whole lot | all 64 templates | every last template |
        the full catalog | the complete catalog | everything else | all the rest""",
    # After a name these point back at it ("run quick, all of them"), else everything.
    "them": "all of them | all of it",
}
QUALITY_PHRASES = {
    "thorough": """thorough | be thorough | thoroughly | best quality | highest quality |
        maximum fidelity | max fidelity | max quality | maximum quality | high quality |
        top quality | in depth | in-depth | thorough judging | thoroughly judged |
        most thorough | thorough ones""",
    "judged": """simulation judging | simulation judged | simulation-judged | simjudged |
        sim-judged | sim judged | judged | judging | with judging | judges | judge |
        with judges | judged ones""",
    "quick": """quick judging | quick judged | quick-judged | light judging |
        lightweight judging | lightly judged | quick judges | lightweight simulation judging |
        quick simulation judging""",
    "standard": """standard judging | standard judged | standard-judged |
        standard simulation judging""",
    "none": """fast and dirty | quick and dirty | no judging | without judging |
        without simulation judging | skip judging | skip the judging | unjudged | no judges |
        no simulation judging | without the judging | without judges | not judged |
        non-judged""",
    # "standard" alone: unjudged, or standard judging? Asked when it matters.
    "std": "standard | standard only | standard ones | the standard ones | standard variants",
}
PRIORITY_PHRASES = {
    "cost": """stay cheap | cheap | cheaply | cheapest | save money | saving money | low cost |
        frugal | frugally | cost priority | prioritize cost | prioritise cost | minimize cost |
        minimise cost | lowest cost | on a budget | don't overspend | do not overspend |
        keep it cheap | keep costs down | keep the cost down | keep costs low | cost-optimized |
        cost optimized | cost-optimised | cost optimised | inexpensive | economical |
        economically | ci/cd | ci | the cheapest way | cheapest way | the cheap way |
        as cheap as possible | as cheaply as possible | cheapest possible | on a shoestring |
        on the cheap | thrifty | budget-friendly | priority cost | priority is cost |
        cost first | cost over speed | cost matters most | cost is what matters |
        minimal cost | minimum cost | least cost | at the lowest cost | penny-pinching |
        cheapest first | cheapest ones first | optimise for cost | optimize for cost |
        optimised for cost | optimized for cost | keep spending low | keep spend low |
        keep the cost low | keep the costs low | low spend | minimal spend | cost-conscious |
        cost conscious | cost-efficient | cost efficient | cost-effective | cost effective |
        least expensive | cheaply as possible""",
    "speed": """fast | run fast | quickly | asap | as fast as possible | as soon as possible |
        speed | speed priority | hurry | in a hurry | max parallelism | maximum parallelism |
        urgent | urgently | rapidly | fastest | cost doesn't matter | cost does not matter |
        money is no object | cost is no object | go fast | prioritize speed |
        prioritise speed | full speed | as fast as you can | as quickly as possible |
        as quickly as you can | the fastest way | fastest way | the fast way |
        don't care about cost | don't care about the cost | do not care about cost |
        do not care about the cost | regardless of cost | whatever it costs |
        spare no expense | speed matters most | speed matters | speed is what matters |
        speed is key | speed first | speed over cost | cost doesn't | cost does not |
        priority speed | priority is speed | fast as possible | quick as possible |
        as quick as possible | pronto | right away | real quick | really quick |
        in a rush | rush | rush it | optimise for speed | optimize for speed |
        optimised for speed | optimized for speed | speed it up | quick as you can |
        fastest possible | time is of the essence | high priority""",
    "balanced": """balanced | balance | reasonable speed | balanced strategy | middle ground |
        balance cost and speed | balance speed and cost | balancing cost and speed |
        a balance of cost and speed | balanced priority | priority balanced |
        priority is balanced | middle of the road | balanced approach | reasonable pace |
        moderate pace | steady pace | normal speed | normal pace | default priority""",
}
INTENT_PHRASES = {
    "run": """run | start | launch | execute | go | kick off | test | try | fire | fire off |
        begin | running | let's run | lets run | rerun | re-run | ran | spin up | kicking off |
        kick it off | do | get | going | go ahead with | go ahead and run | trigger | queue up |
        smoke | smoke test | give | another go | a go | another run | let's do | lets do |
        fire up | start up | run through | do a run of | kick | repeat | redo""",
    "plan": """plan | estimate | how much would | what would | dry run | dry-run | preview |
        quote | price | show me a plan | what if | how long would | propose | suggest |
        recommend | what does | how much does | how much is | how much for |
        what would it cost""",
}
BREADTH_PHRASES = """all | every | whole | entire | suite | complete | all the | each | full set |
    all of the | all of | each of | each of the | every one of | the whole | the entire |
    the rest of | rest of | the remaining | remaining | everything in | everything from |
    everything of | every template in | every template of | all templates in |
    all templates of | all templates from | everything within"""
# Words that say which kind of name the one before them is: "the quick suite".
SUITE_WORDS = "suite | suites"
CATEGORY_WORDS = "category | categories"
EXCLUDE_PHRASES = {
    "": """but not | except | except for | excluding | without | minus | skip | skipping |
        leave out | leaving out | other than | apart from | but without | but skip | omit |
        omitting | exclude | but no | besides | but leave out | and not | nor |
        with the exception of | but exclude | but excluding | drop | dropping | sans | less |
        but minus | bar | barring | save for | aside from | not including | but omit |
        ignoring | ignore | but skip the | minus the""",
    # Read as an exclusion only before a name or a word not known ("no rush" is not one).
    "maybe": "no | not",
    # Read as an exclusion only before a name ("skip X but run the rest" ends one).
    "but": "but",
    "all": "everything but | everything except | everything excluding | everything other than",
    "breadth": "all but | all except | all apart from | all other than",
}
# "leave X out": the cue and the word that ends its object.
LEAVE_WORDS = "leave | leaving"
UNION_PHRASES = """and | plus | along with | together with | as well as | also | then | and then |
    and also | & | + | with | both | in addition to | and the | followed by"""
# Between names: pick one. The request is asked about.
OR_PHRASES = "or | either | or else | or maybe | or perhaps"
# Nouns that name no set but say that a set was meant ("the detective ones").
NOUNS = """templates template sims sim simulations simulation scenarios scenario ones one
    variants variant set sandboxes sandbox tests jobs job runs stuff things"""
# Words read past: politeness, articles, pronouns, auxiliaries, the words around numbers.
FILLER = """
please pls plz kindly thanks thank thx ty ta cheers sorry alright morning afternoon
evening team folks guys everyone hoping hope wondering wonder think guess maybe perhaps
actually basically honestly anyway btw fyi tonight tomorrow later soon quickie bother
appreciate appreciated really
mind chance hey hi hello ok okay sure yes great good fine cool awesome
the a an of to for me i we us you u our my your their its it's his her
want need would like could can will shall should may might must let let's lets i'd we'd
i'm we're you're gonna wanna just only now again once also too as well so when whenever
this that these those them they it is are be been being was were do does did done
in on at by from via using use with into up out off over through about
ensure make sure check checks validation analysis coverage pipeline quality
budget budgets usd dollars dollar cost costs money spend spending bill total overall max
maximum limit cap tops time parallel priority
by itself on its own itself themselves alone separately individually
another round once more one more time afterwards later today tonight now please
if possible when you can when you get a chance if you can if you could
otherwise go ahead no worries no problem no pressure stay keep kind so kind
mode modes portal-mode profiles profile batch all-in bit do's
is what matters matters what
"""
# Phrases read past as a whole (their words alone may mean something, or nothing known).
FILLER_PHRASES = """right now | when you get a chance | when you can | if you can | if possible |
    if you could | for me | for us | thank you | thanks a lot | no worries | by itself |
    on its own | as usual | like always | nothing fancy | quick question | good morning |
    good afternoon | good evening | hi there | hello there | hey there | before lunch |
    after lunch | this morning | this afternoon | this evening | end of day | by eod |
    when possible | whenever you can | at your convenience | much appreciated |
    thanks in advance | thanks so much | thank you so much | if that's ok | if that's okay |
    if that works | sanity check | double check | as a sanity check | one more time |
    quick favour | quick favor | quick request | quick ask | quick thing |
    quick note | nothing else | nothing more | and nothing else | that's it | that is all |
    that's all | here's the deal | tagged | tagged with | with the tag | labelled | labeled |
    marked"""
# Words a request may carry after its names, each with the phrase it starts ("only").
TOPIC_NOUNS = "analysis research study studies purposes"
# Count words before a name ("the two vc pitch ones", "the 7 quick templates").
COUNTS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
          "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "fifteen": 15,
          "sixteen": 16, "twenty": 20, "sixty-four": 64, "both": 2}
# Pronouns: as the object of an exclusion they name nothing the reader can see; a
# reference ("those", "the other one") names nothing anywhere.
PRONOUNS = {
    "object": "it | them | they | something | anything | whatever | whichever",
    "reference": """those | these | that | this | the other one | the others | the other ones |
        the rest | that one | this one | those ones | these ones | the same | same ones |
        the same ones""",
}


def phrases(table: str) -> list[str]:
    """A table's phrases: `|`-separated, whitespace collapsed."""
    return [" ".join(p.split()) for p in table.split("|") if p.strip()]


# Words known but never read as a selection: the spelling corrector leaves them alone
# (so "thing" never becomes "things", "slow" never a name), and the question reader
# uses them. A request that says them is asked about, since they name nothing.
_COMMON = """
what which who why how when where whose is are was were did does do has have had done
failed fail fails failing failure failures error errors wrong broke broken crash crashed
flaky reliable unreliable reliability success rate worst best pass passed passing
expensive cheaper cheapest priciest pricey costly costliest spend spent spending burn burned
burnt burning damage eating money tokens token count usage used use llm
waiting wait waited pending queue queued queueing held hold blocked stuck started yet sitting
status progress doing going going-on done finished complete completed running active left
longer remaining eta long
compare compared comparison diff against versus better worse previous before last latest
current yesterday today week month time times ago recent recently history historically
average typically usually usual over across per total typical
thing slow slower new big small old other same timeouts timeout ooms oom
show tell list rank explain give report happened happen hit
what's who's where's how's it's that's there's here's isn't aren't wasn't weren't hasn't
haven't didn't doesn't don't won't can't couldn't shouldn't wouldn't i'm i've i'd we've we'll
you're they're let's
"""
COMMON = frozenset(_COMMON.split())
# Plain English words that are never read as a slip of another word, nor a slip read as
# them ("worry" is not "sorry", "sort" is not "short").
_ENGLISH = """
worry worried concern concerned care know see look looks help work works working worked
need wants like love hate keep make take come say feel seem mean find leave call ask turn
move believe bring write lose pay meet include continue set learn change understand watch
follow stop create read allow add grow open win offer remember consider appear buy serve
send expect build stay fall cut reach remain suggest raise sell require decide pull stable
state deal favour favor worth rather still even ever never always already often sometimes
much many more most less least few lot lots bit little enough such same own able sure true
real whole half empty next first second third final early late long short high low
"""
ENGLISH = frozenset(_ENGLISH.split())

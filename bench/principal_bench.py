"""How well the principal reads what operators write, on a corpus it was never tuned on.

The corpus (`tests/principal/corpus/`, its README says how it was written and split)
holds requests and questions in plain words, each labelled with the reading a careful
human reader gives it. Every line goes through the real reading path:

- a request: the chat's first door (`questions.recognise`: a request taken for a
  question is answered, not planned), then `plan(catalog, PlanRequest(query=text))`,
  what `POST /v1/plans` and the chat do, over the built-in catalog;
- a question: `questions.recognise`, the door the chat answers questions by.

Each line is classed

- right: a request's selection (before the budget and the runtime limit, as the
  corpus labels it), budget, max_parallel, max_runtime_s and priority all match the
  label; an "ask" label is right only when the principal asks; a question is
  recognised as its labelled kind, about its labelled subject;
- asked: the principal asked instead (choices, `ambiguous_request`, another refusal
  that tells the operator what to say, or a plan with words it did not understand,
  which the chat holds for a yes);
- wrong: anything else, e.g. a selection or a number that differs from the label, a
  guess where the label asks, a request answered as a question, a question planned.

A reading's time is the chat's door and the planner together (a question: the door
alone), the best of 3 runs (the readings are pure; the machine is shared, and a run
that was preempted measures the machine, not the reading), with warm caches (the
lexicon is built once per catalog).

The held-out halves are only ever reported as rates: no held-out line, text or id is
printed, whatever the flags (`--misses` lists the development half's misses only).

    python -m bench.principal_bench [--dev-only] [--misses]

The last line is the verdict on the held-out requests:
`principal: right R %, wrong W %, asked A % (held-out; ...): OK|MISS`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.support import p99_ms
from controller.catalog.templates import Catalog, load_catalog
from controller.errors import AmbiguousRequestError, SimpleError
from controller.language.grammar import read_request
from controller.planning.plan import PlanRequest, plan
from controller.principal import questions
from controller.settings import BUILTIN_CATALOG_DIR

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "principal" / "corpus"
TARGET_RIGHT, TARGET_WRONG, TARGET_DEV, TARGET_QUESTIONS, TARGET_P99_MS = 95.0, 1.0, 97.0, 90.0, 5.0
FIELDS = ("budget_usd", "max_parallel", "max_runtime_s", "priority")
# A question whose run is only implied ("what failed?") may be read as about the latest.
RUN_SCOPED = {"run_cost", "failures", "compare_runs", "waiting", "status"}
LIMIT_REASONS = ("over budget", "over the runtime limit")
REPEATS = 3


@dataclass(frozen=True)
class Verdict:
    outcome: str  # right | asked | wrong
    why: str
    seconds: float


def load(name: str) -> list[dict[str, Any]]:
    with (CORPUS / name).open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def timed(read: Callable[[], Any]) -> tuple[Any, float]:
    """`read()` and its best time of `REPEATS`: the machine is shared, a reading is pure."""
    best, result = float("inf"), None
    for _ in range(REPEATS):
        started = time.perf_counter()
        result = read()
        best = min(best, time.perf_counter() - started)
    return result, best


def _read(catalog: Catalog, text: str) -> tuple[Any, Any, str]:
    question = questions.recognise(catalog, text)
    try:
        result = plan(catalog, PlanRequest(query=text)) if question is None else None
        return question, result, ""
    except AmbiguousRequestError:
        return question, None, "choices"
    except SimpleError as e:
        return question, None, f"refused: {e.message}"


def score_request(catalog: Catalog, row: dict[str, Any]) -> Verdict:
    """One request through the chat's door and the planner, classed against its label."""
    expect, text = row["expect"], row["text"]
    (question, result, refusal), seconds = timed(lambda: _read(catalog, text))
    if question is not None:
        return Verdict("wrong", f"taken for a question ({question.kind})", seconds)
    if result is None:
        return Verdict("right" if expect.get("ask") else "asked", refusal, seconds)
    unknown = (result.interpretation or {}).get("not_understood") or []
    if unknown:
        why = f"not understood: {unknown}"
        return Verdict("right" if expect.get("ask") else "asked", why, seconds)
    if expect.get("ask"):
        return Verdict("wrong", f"guessed {len(result.selected)} templates", seconds)
    return Verdict(*_compare(catalog, text, result, expect), seconds)


def _compare(catalog: Catalog, text: str, result: Any, expect: dict[str, Any]) -> tuple[str, str]:
    limited = {e.template_id for e in result.excluded if e.reason.startswith(LIMIT_REASONS)}
    selected = set(result.selected) | limited  # before the budget and the runtime limit
    wanted = set(expect["select"])
    if selected != wanted:
        extra, missing = sorted(selected - wanted), sorted(wanted - selected)
        return "wrong", f"selection: +{len(extra)} {extra[:4]} -{len(missing)} {missing[:4]}"
    reading = read_request(catalog, text)  # what the words stated (the plan fills defaults)
    got = {"budget_usd": reading.budget_usd, "max_parallel": reading.max_parallel,
           "max_runtime_s": reading.max_runtime_s, "priority": reading.priority}
    for name in FIELDS:
        if not _same(got[name], expect[name]):
            return "wrong", f"{name}: {got[name]!r}, label {expect[name]!r}"
    return "right", ""


def _same(got: Any, wanted: Any) -> bool:
    if isinstance(got, int | float) and isinstance(wanted, int | float):
        return abs(float(got) - float(wanted)) < 1e-9
    return bool(got == wanted)


def score_question(catalog: Catalog, row: dict[str, Any]) -> Verdict:
    """One question through the chat's door: its kind and subject, never a plan."""
    expect = row["expect"]
    question, seconds = timed(lambda: questions.recognise(catalog, row["text"]))
    if question is None:
        return Verdict("wrong", "not recognised: it would be read as a request", seconds)
    kind = {"cost": "run_cost", "running": "status"}.get(question.kind, question.kind)
    if kind == "unclear":
        return Verdict("asked", "asked what is meant", seconds)
    if kind != expect["kind"]:
        return Verdict("wrong", f"kind {kind}, label {expect['kind']}", seconds)
    subject = _subject(question)
    wanted = expect["subject"]
    if subject == wanted or (wanted is None and subject == "last" and kind in RUN_SCOPED):
        return Verdict("right", "", seconds)
    return Verdict("wrong", f"subject {subject!r}, label {wanted!r}", seconds)


def _subject(question: Any) -> str | None:
    if hasattr(question, "subject"):
        return question.subject  # type: ignore[no-any-return]
    templates = getattr(question, "templates", ())
    return question.run_id or (templates[0] if len(templates) == 1 else None)


def rates(verdicts: list[Verdict]) -> dict[str, float]:
    counts = Counter(v.outcome for v in verdicts)
    total = max(len(verdicts), 1)
    return {k: 100.0 * counts[k] / total for k in ("right", "wrong", "asked")}


def line(name: str, verdicts: list[Verdict]) -> str:
    r = rates(verdicts)
    return (f"{name:<22} n={len(verdicts):<4} right {r['right']:5.1f} %  "
            f"wrong {r['wrong']:4.1f} %  asked {r['asked']:4.1f} %")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dev-only", action="store_true",
                        help="score the development half only (for work on the grammar)")
    parser.add_argument("--misses", action="store_true",
                        help="list the development half's misses (never the held-out's)")
    args = parser.parse_args(argv)
    catalog = load_catalog([BUILTIN_CATALOG_DIR])
    score_request(catalog, {"text": "run quick", "expect": {"ask": True}})  # warm the caches
    halves = ["dev"] if args.dev_only else ["dev", "heldout"]
    results: dict[tuple[str, str], list[Verdict]] = {}
    for half in halves:
        requests = load(f"{half}_requests.jsonl")
        asked = load(f"{half}_questions.jsonl")
        results[half, "requests"] = [score_request(catalog, r) for r in requests]
        results[half, "questions"] = [score_question(catalog, q) for q in asked]
        if args.misses and half == "dev":
            for row, verdict in zip(requests + asked,
                                    results[half, "requests"] + results[half, "questions"],
                                    strict=True):
                if verdict.outcome != "right":
                    print(f"  {verdict.outcome:<5} {row['id']} {row['text']!r}: {verdict.why}")
    for (half, kind), verdicts in results.items():
        print(line(f"{half} {kind}", verdicts))
    every = [v for verdicts in results.values() for v in verdicts]
    p99 = p99_ms([v.seconds for v in every])
    print(f"p99 per reading: {p99:.2f} ms over {len(every)} readings "
          f"(target < {TARGET_P99_MS:g} ms): {'OK' if p99 < TARGET_P99_MS else 'MISS'}")
    dev = rates(results["dev", "requests"])
    print(f"dev requests right {dev['right']:.1f} % (target ≥ {TARGET_DEV:g} %): "
          f"{'OK' if dev['right'] >= TARGET_DEV else 'MISS'}")
    if args.dev_only:
        return 0
    held_questions = rates(results["heldout", "questions"])
    print(f"held-out questions right {held_questions['right']:.1f} % "
          f"(target ≥ {TARGET_QUESTIONS:g} %): "
          f"{'OK' if held_questions['right'] >= TARGET_QUESTIONS else 'MISS'}")
    held = rates(results["heldout", "requests"])
    ok = held["right"] >= TARGET_RIGHT and held["wrong"] <= TARGET_WRONG
    print(f"principal: right {held['right']:.1f} %, wrong {held['wrong']:.1f} %, asked "
          f"{held['asked']:.1f} % (held-out; target right ≥ {TARGET_RIGHT:g} %, wrong ≤ "
          f"{TARGET_WRONG:g} %): {'OK' if ok else 'MISS'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Conversations with the principal: turns, choices and confirmations.

A turn is one message in; the reply has `text` plus structured `plan`, `run`,
`choices`, `answer` and `notices`. Nothing is started without a plan that the
planner made, and a plan whose max estimate is above `SIMPLE_CONFIRM_ABOVE_USD`,
that a budget cut short, or whose words were not all understood waits for a
"yes" (or `confirm: true`). Conversations live in memory (in the database on API
replicas: `controller.principal.stored`), bounded in number, size and idle time, and
belong to the API token that opened them.
"""

from __future__ import annotations

import logging
import re
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from controller.errors import NotFoundError, SimpleError
from controller.language.choices import Choice
from controller.language.grammar import read_request
from controller.planning.model import Plan, PlanRequest, Priority
from controller.planning.plan import plan
from controller.principal import questions
from controller.principal.notices import run_notices
from controller.runs import cancel_run, create_run, get_run

if TYPE_CHECKING:
    from controller.service import Controller

logger = logging.getLogger(__name__)

MAX_HISTORY = 40  # turns kept per conversation (for the LLM's context)
MAX_SEEN = 500  # notice keys remembered per conversation
MAX_RUNS = 20  # runs a conversation follows for notices
YES = re.compile(r"^\s*(?:y|yes|yep|yeah|ok|okay|sure|proceed|confirm|go ahead|do it|start it"
                  r"|go)\s*[.!]*\s*$")
NO = re.compile(r"^\s*(?:n|no|nope|cancel that|never ?mind|abort|don't|do not)\s*[.!]*\s*$")
PICK = re.compile(r"^\s*(?:option\s+)?\(?([a-f])\)?\s*[.!]?\s*(?:please)?\s*$")


@dataclass
class Pending:
    """An action waiting for a yes: start a planned run, or cancel one."""

    kind: str  # start | cancel
    request: PlanRequest | None = None
    run_id: str | None = None
    text: str = ""
    by_model: bool = False  # a model proposed it: only the user's own "yes" confirms it


@dataclass
class Conversation:
    id: str
    owner: str
    touched: float
    history: list[dict[str, str]] = field(default_factory=list)
    pending: Pending | None = None
    choices: dict[str, Choice] = field(default_factory=dict)
    carried: PlanRequest | None = None  # budget, priority... of the request that got choices
    carried_start: bool = False  # that request asked to run, not only to plan
    runs: list[str] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def remember(self, role: str, text: str) -> None:
        self.history.append({"role": role, "content": text[:4000]})
        del self.history[:-MAX_HISTORY]

    def follow(self, run_id: str | None) -> None:
        if run_id:
            self.runs = [*[r for r in self.runs if r != run_id][-(MAX_RUNS - 1):], run_id]

    def is_answer(self, text: str, confirm: bool) -> bool:
        """True when `text` answers what this conversation asked: a yes or no to its pending
        action, or a pick while it offers choices. The principal's own rules answer these,
        never a model."""
        lowered = text.lower()
        if self.confirms(text, confirm) or (self.pending and NO.match(lowered)):
            return True
        return bool(PICK.match(lowered) and self.choices)

    def confirms(self, text: str, confirm: bool) -> bool:
        """Whether this turn says yes to the pending action. `confirm` (the API's flag,
        `simplectl ask --yes`) confirms only what the user's own words asked for, never
        what a model proposed: that takes the user's "yes" in words."""
        if self.pending is None:
            return False
        return bool(YES.match(text.lower())) or (confirm and not self.pending.by_model)


class Conversations:
    """Bounded in-memory store: at most `limit` conversations, dropped when idle."""

    def __init__(self, limit: int, idle_s: float) -> None:
        self.limit, self.idle_s = limit, idle_s
        self._items: OrderedDict[str, Conversation] = OrderedDict()
        self._lock = threading.Lock()

    def open(self, conversation_id: str | None, owner: str) -> Conversation:
        now = time.monotonic()
        with self._lock:
            for key in [k for k, c in self._items.items() if now - c.touched > self.idle_s]:
                del self._items[key]
            if conversation_id is None:
                while len(self._items) >= self.limit:
                    self._items.popitem(last=False)
                conversation = Conversation("conv-" + secrets.token_hex(12), owner, now)
                self._items[conversation.id] = conversation
                return conversation
            found = self._items.get(conversation_id)
            if found is None or not secrets.compare_digest(found.owner, owner):
                raise NotFoundError(
                    f"unknown conversation {conversation_id}",
                    hint="leave conversation_id out to start a new conversation (they end "
                    "after an idle hour, and belong to the token that opened them)",
                )
            found.touched = now
            self._items.move_to_end(conversation_id)
            return found

    def save(self, conversation: Conversation) -> None:
        """Keep the conversation's state after a turn (in memory: nothing to do)."""

    def __len__(self) -> int:
        return len(self._items)


class Principal:
    """The deterministic principal; `turn` answers one message of a conversation."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller
        settings = controller.settings
        self.conversations = Conversations(settings.chat_max_conversations, settings.chat_idle_s)
        self.threshold = settings.confirm_above_usd

    def turn(
        self, conversation_id: str | None, text: str, owner: str = "", confirm: bool = False
    ) -> dict[str, Any]:
        conversation = self.conversations.open(conversation_id, owner)
        with conversation.lock:  # one turn at a time: a double "yes" starts one run
            conversation.remember("user", text)
            try:
                reply = self.respond(conversation, text, confirm)
            except SimpleError as e:
                reply = {"kind": "error", "text": str(e)}
            finished = self.finish(conversation, reply)
            self.conversations.save(conversation)
            return finished

    def finish(self, conversation: Conversation, reply: dict[str, Any]) -> dict[str, Any]:
        """Fill the reply's fields, add new notices, remember what was said."""
        for name in ("plan", "run", "answer", "interpretation"):
            reply.setdefault(name, None)
        reply.setdefault("choices", [])
        reply.setdefault("source", "principal")
        reply["needs_confirmation"] = conversation.pending is not None
        reply["conversation_id"] = conversation.id
        reply["notices"] = self.new_notices(conversation)
        if reply["notices"]:
            reply["text"] += "\n" + "\n".join(f"Notice: {n['message']}" for n in reply["notices"])
        conversation.remember("assistant", reply["text"])
        return reply

    def respond(self, conversation: Conversation, text: str, confirm: bool) -> dict[str, Any]:
        if conversation.confirms(text, confirm):
            return self.carry_out(conversation)
        if conversation.pending and NO.match(text.lower()):
            conversation.pending = None
            return {"kind": "declined", "text": "Fine, nothing was started or cancelled."}
        picked = PICK.match(text.lower())
        if picked and picked.group(1).upper() in conversation.choices:
            return self.pick(conversation, picked.group(1).upper(), confirm)
        question = questions.recognise(self.controller.catalog, text)
        if question is not None:
            return self.ask(conversation, question, confirm)
        return self.request(conversation, text, confirm)

    # --- plans and runs ------------------------------------------------------------------

    def request(self, conversation: Conversation, text: str, confirm: bool) -> dict[str, Any]:
        catalog = self.controller.catalog
        reading = read_request(catalog, text)
        conversation.pending = None
        if reading.choices:
            conversation.choices = {c.key: c for c in reading.choices}
            conversation.carried = PlanRequest(
                budget_usd=reading.budget_usd,
                priority=Priority(reading.priority) if reading.priority else Priority.BALANCED,
                max_parallel=reading.max_parallel,
                max_runtime_s=reading.max_runtime_s,
            )
            conversation.carried_start = reading.intent == "run"
            lead = _choice_lead(reading.not_understood, reading.ask)
            return {
                "kind": "choices",
                "text": lead + "\n".join(c.line() for c in reading.choices)
                + "\nAnswer with a letter, or say more.",
                "choices": [c.public() for c in reading.choices],
                "interpretation": reading.interpretation(),
            }
        conversation.choices = {}
        start = reading.intent == "run"
        return self.propose(conversation, PlanRequest(query=text), start, confirm, text)

    def pick(self, conversation: Conversation, key: str, confirm: bool) -> dict[str, Any]:
        choice = conversation.choices.pop(key)
        conversation.choices = {}
        carried = conversation.carried or PlanRequest()
        request = PlanRequest(
            suites=choice.suites, templates=choice.templates, budget_usd=carried.budget_usd,
            priority=carried.priority, max_parallel=carried.max_parallel,
            max_runtime_s=carried.max_runtime_s,
        )
        start = conversation.carried_start
        return self.propose(conversation, request, start, confirm, f"{key}) {choice.label}")

    def propose(
        self, conversation: Conversation, request: PlanRequest, start: bool, confirm: bool,
        text: str, limit_usd: float | None = None, by_model: bool = False,
    ) -> dict[str, Any]:
        """Plan; start it when asked to and safe, else wait for a yes. A model's proposal
        (`by_model`) always waits, whatever its cost, unless `confirm` was checked against
        the user's own words by the caller."""
        the_plan = plan(self.controller.catalog, request)
        reasons = self.confirmation_reasons(the_plan, limit_usd)
        if by_model and not confirm:
            reasons.append("The model proposed it: say yes to start it.")
        if start and (confirm or not reasons):
            return self.start(conversation, request, the_plan, text)
        conversation.pending = Pending("start", request=request, text=text, by_model=by_model)
        why = (" " + " ".join(reasons)) if reasons else ""
        return {
            "kind": "confirm" if start else "plan",
            "text": describe_plan(the_plan) + why + "\nStart it? (yes/no)",
            "plan": the_plan.to_dict(),
            "interpretation": the_plan.interpretation,
        }

    def confirmation_reasons(self, the_plan: Plan, limit_usd: float | None = None) -> list[str]:
        reasons = []
        high = the_plan.estimated_cost_usd[1]
        if high > self.threshold:
            reasons.append(f"Its max estimate ${high:,.2f} is above the ${self.threshold:,.2f} "
                           "I start without asking.")
        if any(e.reason.startswith("over budget") for e in the_plan.excluded):
            reasons.append("The budget leaves some templates out.")
        if limit_usd is not None and high > limit_usd:
            reasons.append(f"Its max estimate ${high:,.2f} is above your ${limit_usd:,.2f}.")
        unknown = (the_plan.interpretation or {}).get("not_understood") or []
        if unknown:
            reasons.append(f"I did not understand: {', '.join(unknown[:10])}.")
        return reasons

    def start(
        self, conversation: Conversation, request: PlanRequest, the_plan: Plan, text: str
    ) -> dict[str, Any]:
        controller = self.controller
        body = {"chat": text[:2000], "conversation_id": conversation.id,
                "plan_selected": list(the_plan.selected)}
        run_id, _ = create_run(
            controller.engine, controller.catalog, request, body,
            backend=controller.backend.name, default_image=controller.settings.default_image,
        )
        controller.kick()
        conversation.pending = None
        conversation.follow(run_id)
        logger.info("principal started run %s from conversation %s", run_id, conversation.id)
        run = get_run(controller.engine, run_id)
        return {
            "kind": "started",
            "text": f"Started {run_id}: " + describe_plan(the_plan)
            + f" Ask 'how's {run_id} doing?' any time.",
            "plan": the_plan.to_dict(),
            "run": run,
            "interpretation": the_plan.interpretation,
        }

    def carry_out(self, conversation: Conversation) -> dict[str, Any]:
        pending = conversation.pending
        assert pending is not None
        conversation.pending = None
        if pending.kind == "cancel" and pending.run_id:
            run = cancel_run(self.controller.engine, pending.run_id)
            self.controller.kick()
            return {"kind": "cancel_requested", "run": run,
                    "text": f"Cancel requested for {pending.run_id} (it was {run['status']})."}
        assert pending.request is not None
        the_plan = plan(self.controller.catalog, pending.request)
        return self.start(conversation, pending.request, the_plan, pending.text)

    # --- questions -----------------------------------------------------------------------

    def ask(
        self, conversation: Conversation, question: questions.Question, confirm: bool
    ) -> dict[str, Any]:
        """Answer from the database; a question never starts or proposes a run."""
        last = conversation.runs[-1] if conversation.runs else None
        if question.kind == "cancel":
            return self.ask_cancel(conversation, question.run_id or last, confirm)
        conversation.pending = None
        conversation.choices = {}
        answer = questions.answer(self.controller.engine, self.controller.catalog, question,
                                  last)
        conversation.follow(answer.run_id)
        return {"kind": "answer", "text": answer.text, "answer": answer.data}

    def ask_cancel(
        self, conversation: Conversation, run_id: str | None, confirm: bool
    ) -> dict[str, Any]:
        if run_id is None:
            run_id = questions.answer_running(self.controller.engine).run_id
        if run_id is None:
            return {"kind": "answer", "text": "Which run? Say 'cancel run-…' "
                    "(ask 'what's running?' for the ids)."}
        run = get_run(self.controller.engine, run_id)
        conversation.pending = Pending("cancel", run_id=run_id)
        if confirm:
            return self.carry_out(conversation)
        spent = sum(s["cost_usd"] for s in run["sandboxes"])
        return {"kind": "confirm", "run": run,
                "text": f"Cancel {run_id} ({run['status']}, ${spent:,.2f} spent)? (yes/no)"}

    def notices_for(self, conversation: Conversation) -> list[dict[str, Any]]:
        """New notices of the conversation's runs (for a push between turns)."""
        with conversation.lock:
            found = self.new_notices(conversation)
            if found:
                self.conversations.save(conversation)
            return found

    def new_notices(self, conversation: Conversation) -> list[dict[str, Any]]:
        found = []
        for run_id in conversation.runs[-5:]:
            for notice in run_notices(self.controller.engine, self.controller.catalog, run_id):
                if notice["key"] not in conversation.seen and len(conversation.seen) < MAX_SEEN:
                    conversation.seen.add(notice["key"])
                    found.append(notice)
        return found


def describe_plan(the_plan: Plan) -> str:
    """One paragraph: what runs, what it costs, what was left out and why."""
    low, high = the_plan.estimated_cost_usd
    text = (
        f"{len(the_plan.selected)} templates, ${low:,.2f}-{high:,.2f}, about "
        f"{the_plan.estimated_runtime_s[1] / 60:.0f} min at most, {the_plan.max_parallel} at a "
        f"time ({the_plan.priority.value})."
    )
    if the_plan.excluded:
        reasons = sorted({e.reason.split(":")[0] for e in the_plan.excluded})
        text += f" Left out: {len(the_plan.excluded)} ({'; '.join(reasons)})."
    interpretation = the_plan.interpretation or {}
    if interpretation.get("notes"):
        text += " Note: " + " ".join(n.rstrip(".") + "." for n in interpretation["notes"])
    return text


def _choice_lead(unknown: tuple[str, ...], why: str | None = None) -> str:
    lead = "That could mean several things. "
    if why:
        lead = f"I would rather ask than guess: {why}. "
    elif unknown:
        lead = f"I did not understand {', '.join(unknown[:10])}. "
    return lead + "Do you want:\n"

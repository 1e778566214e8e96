"""The principal with an optional LLM: the model phrases and proposes, SIMPLE decides.

Without `SIMPLE_LLM_BASE_URL` the deterministic `Principal` answers everything.
With it, each new request goes to the model first; a tool call it proposes
(`plan`, `start`, `status`, `cancel`) is checked and carried out by the same
planner, budget checks and confirmations as typed words: unknown templates are
refused by the catalog, a budget above the one the user stated is refused, a
start waits for the user's "yes" whatever its cost (never the model's; the user's
`confirm` flag covers it only when the user's own words asked for that run), and a
cancel always asks. Confirmations and choice picks never go to the model. Text that
sandboxes wrote reaches the model only as quoted, untrusted data (`untrusted`). If
the model fails, times out or answers nonsense, the deterministic answer is used.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from controller.errors import InputError, SimpleError
from controller.language.grammar import read_request
from controller.planning.model import PlanRequest, Priority
from controller.planning.plan import plan
from controller.principal import questions
from controller.principal.conversation import Conversation, Principal
from controller.principal.llm import Completion, LLMClient, LLMError, ToolCall
from controller.principal.stored import StoredConversations
from controller.principal.untrusted import data_block, for_model

if TYPE_CHECKING:
    from controller.service import Controller

logger = logging.getLogger(__name__)
HISTORY_SENT = 20


class ToolArguments(BaseModel):
    """What a proposal may say; anything else in it is ignored."""

    model_config = ConfigDict(extra="ignore")
    query: str | None = Field(None, max_length=2000)
    suites: list[str] = Field(default_factory=list, max_length=64)
    templates: list[str] = Field(default_factory=list, max_length=128)
    budget_usd: float | None = Field(None, gt=0, allow_inf_nan=False)
    priority: Priority | None = None
    max_parallel: int | None = Field(None, ge=1, le=1000)
    question: str | None = Field(None, max_length=2000)
    run_id: str | None = Field(None, pattern=r"^run-[0-9a-f]{8}$")


def create_principal(controller: Controller) -> Principal:
    settings = controller.settings
    if not settings.llm_base_url:
        principal = Principal(controller)
    else:
        client = LLMClient(settings.llm_base_url, settings.llm_model, settings.llm_api_key,
                           settings.llm_timeout_s)
        principal = AssistedPrincipal(controller, client)
    if controller.role == "api":  # replicas: the next turn may come to another one
        principal.conversations = StoredConversations(
            controller.engine, settings.chat_max_conversations, settings.chat_idle_s)
    return principal


class AssistedPrincipal(Principal):
    """`Principal` that lets a model phrase answers and propose tool calls."""

    def __init__(self, controller: Controller, client: LLMClient) -> None:
        super().__init__(controller)
        self.client = client

    def respond(self, conversation: Conversation, text: str, confirm: bool) -> dict[str, Any]:
        if conversation.is_answer(text, confirm):
            return super().respond(conversation, text, confirm)
        try:
            completion = self.client.complete(self.messages(conversation))
        except LLMError as e:
            logger.warning("LLM unavailable, answering without it: %s", e)
            return super().respond(conversation, text, confirm)
        if not completion.tool_calls:
            if not completion.content.strip():
                return super().respond(conversation, text, confirm)
            return {"kind": "answer", "text": completion.content, "source": "llm"}
        return self.proposal(conversation, text, completion, confirm)

    def proposal(
        self, conversation: Conversation, text: str, completion: Completion, confirm: bool
    ) -> dict[str, Any]:
        call = completion.tool_calls[0]
        try:
            reply = self.carry_proposal(conversation, text, call, confirm)
        except (SimpleError, ValidationError) as e:
            reason = e.message if isinstance(e, SimpleError) else _first_error(e)
            logger.info("refused the model's %s proposal: %s", call.name, reason)
            return {"kind": "refused", "source": "llm",
                    "text": f"I will not do what the model proposed ({call.name}): {reason}"}
        if completion.content.strip():
            reply["text"] = completion.content.strip() + "\n\n" + reply["text"]
        reply["source"] = "llm"
        return reply

    def carry_proposal(
        self, conversation: Conversation, text: str, call: ToolCall, confirm: bool
    ) -> dict[str, Any]:
        args = ToolArguments.model_validate(call.arguments)
        if call.name == "status":
            question = questions.recognise(self.controller.catalog, args.question or text)
            return self.ask(conversation, question or questions.Question("status"), False)
        if call.name == "cancel":
            reply = self.ask_cancel(conversation, args.run_id, False)
            if conversation.pending is not None:
                conversation.pending.by_model = True
            return reply
        if call.name not in ("plan", "start"):
            raise InputError(f"unknown tool {call.name!r}", hint="plan, start, status, cancel")
        limit = self.user_budget(conversation, text)
        if limit is not None and (args.budget_usd is None or args.budget_usd > limit):
            raise InputError(
                f"its budget ({_money(args.budget_usd)}) is above the ${limit:,.2f} you set",
                hint="say a larger budget yourself if you want one",
            )
        request = PlanRequest(
            suites=tuple(args.suites), templates=tuple(args.templates), query=args.query,
            budget_usd=args.budget_usd, priority=args.priority,
            max_parallel=args.max_parallel,
        )
        confirmed = confirm and self.user_asked_for(text, request)
        return self.propose(conversation, request, call.name == "start", confirmed, text, limit,
                            by_model=True)

    def user_asked_for(self, text: str, request: PlanRequest) -> bool:
        """Whether the user's own words, read without the model, ask to run at least what
        the model's `request` would run, at its cost or more: only then does the user's
        `confirm` (`simplectl ask --yes`) cover the model's proposal."""
        catalog = self.controller.catalog
        reading = read_request(catalog, text)
        if reading.intent != "run" or reading.choices:
            return False
        theirs, proposed = plan(catalog, PlanRequest(query=text)), plan(catalog, request)
        return set(proposed.selected) <= set(theirs.selected) and (
            proposed.estimated_cost_usd[1] <= theirs.estimated_cost_usd[1]
        )

    def user_budget(self, conversation: Conversation, text: str) -> float | None:
        """The lowest budget the user stated in this conversation, in their own words."""
        stated = [
            read_request(self.controller.catalog, turn["content"]).budget_usd
            for turn in conversation.history
            if turn["role"] == "user"
        ]
        amounts = [a for a in stated if a is not None]
        return min(amounts) if amounts else None

    def messages(self, conversation: Conversation) -> list[dict[str, str]]:
        catalog = self.controller.catalog
        costs = {
            name: [sum(catalog.templates[t].cost_usd[i] for t in ids) for i in (0, 1)]
            for name, ids in catalog.suites.items()
        }
        suites = "; ".join(
            f"{name} ({len(catalog.suites[name])} templates, ${low:.0f}-{high:.0f})"
            for name, (low, high) in sorted(costs.items())
        )
        system = (
            "You are the principal architect of SIMPLE, which runs simulation templates in "
            "parallel sandboxes. Be concise and precise; include numbers. To act, call a tool: "
            "plan, start, status or cancel. SIMPLE checks every proposal against the catalog "
            "and the user's budget and asks the user to confirm costly runs; you cannot "
            f"confirm for the user. Suites: {suites}."
        )
        turns, pieces = for_model(conversation.history[-HISTORY_SENT:])
        return [{"role": "system", "content": system + data_block(pieces)}, *turns]


def _money(value: float | None) -> str:
    return "none" if value is None else f"${value:,.2f}"


def _first_error(error: ValidationError) -> str:
    first = error.errors()[0]
    return f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"

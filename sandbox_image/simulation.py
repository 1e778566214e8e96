"""The built-in workload: a deterministic, step-based multi-agent simulation (after ADR-011).

Each step has three phases. PERCEIVE: every agent reads the shared world state
(the messages sent to it in the previous step). ACT: agents act in parallel,
at most `max_concurrency` at once, with a synthetic seeded policy standing in
for the LLM (random token counts, simulated latency, cost = tokens x a fixed
price). COMMIT: the actions are applied in the step's agent order and the step
is handed, with the new world state, to a `StepSink` that stores it atomically.
Every random draw comes from an RNG derived from (seed, step, agent), so the
same seed and config give the same rows whatever the thread timing.

The config keys, their defaults and the test hooks: `sandbox_image.simulation_config`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from sandbox_image.simulation_config import SimulationConfig

PRICE_PER_1K_TOKENS_USD = 0.004  # a 6-agent x 7-step template costs about $0.5
TOKENS_PER_CALL = (400, 1600)
ENTITY_CHANCE = 0.3
BRANCH_CHANCE = 0.5


class SimulationFailure(Exception):
    """A fatal failure of the run, reported in the `failed` event."""

    def __init__(self, error_type: str, message: str, *, transient: bool, step: int) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.message = message
        self.transient = transient
        self.step = step


class Cancelled(SimulationFailure):
    """The run was stopped by SIGTERM/SIGINT at a step boundary."""

    def __init__(self, step: int) -> None:
        super().__init__(
            "cancelled", f"stopped by a signal after step {step}", transient=False, step=step
        )


@dataclass(frozen=True)
class StepError:
    """One non-fatal error inside a step (reported as an `error` event)."""

    agent_id: str
    message: str


@dataclass(frozen=True)
class StepResult:
    """What one committed step did; becomes a `steps` row and a `progress` event."""

    step: int
    duration_ms: int
    actions: int
    failures: int
    llm_calls: int
    tokens: int
    cost_usd: float
    entities_created: int
    timepoints_created: int
    errors: tuple[StepError, ...] = ()


@dataclass
class Totals:
    """Running totals of the committed steps; the `runs` row and `completed` data."""

    steps_completed: int = 0
    cost_usd: float = 0.0
    tokens_used: int = 0
    llm_calls: int = 0
    entities_created: int = 0
    timepoints_created: int = 0

    def add(self, result: StepResult) -> None:
        """Fold one committed step in."""
        self.steps_completed += 1
        self.cost_usd = round(self.cost_usd + result.cost_usd, 6)
        self.tokens_used += result.tokens
        self.llm_calls += result.llm_calls
        self.entities_created += result.entities_created
        self.timepoints_created += result.timepoints_created


class StepSink(Protocol):
    """Stores a committed step atomically (the runtime's SQLite file and outbox)."""

    def commit_step(self, result: StepResult, totals: Totals, world: dict[str, Any]) -> None:
        """Store the step row, the totals and the world state in one transaction."""


@dataclass(frozen=True)
class Agent:
    """A simulated participant; `priority` orders agents under the `priority` strategy."""

    agent_id: str
    index: int
    priority: float


@dataclass
class AgentAction:
    """An agent's buffered output: applied only in the commit phase."""

    agent_id: str
    ok: bool = True
    llm_calls: int = 0
    tokens: int = 0
    errors: list[str] = field(default_factory=list)
    message_to: str | None = None
    message: str = ""
    creates_entity: bool = False


class LLMCallError(Exception):
    """A simulated LLM call failed (retryable by the policy)."""


class AgentTimeout(Exception):
    """An agent ran past its agent or step deadline."""


def derived_rng(seed: int, *parts: object) -> random.Random:
    """An RNG for (seed, parts): stable across processes (string seeds hash with SHA-512)."""
    return random.Random(":".join(str(p) for p in (seed, *parts)))


def simulated_llm_call(rng: random.Random, latency_ms: float, error_rate: float,
                       deadline: float) -> int:
    """Stand-in for an LLM call: draws its outcome, sleeps its latency, returns tokens."""
    failed = rng.random() < error_rate
    tokens = rng.randint(*TOKENS_PER_CALL)
    latency_s = latency_ms * tokens / 1_000_000
    remaining = deadline - time.monotonic()
    if latency_s >= remaining:
        time.sleep(max(remaining, 0.0))
        raise AgentTimeout("the deadline passed during an LLM call")
    time.sleep(latency_s)
    if failed:
        raise LLMCallError("simulated LLM error (rate limited)")
    return tokens


class Simulation:
    """Runs the configured steps: perceive, act (bounded parallel), commit."""

    def __init__(self, config: SimulationConfig, *, seed: int, attempt: int = 1,
                 should_stop: Callable[[], bool] = lambda: False) -> None:
        self.config = config
        self.seed = seed
        self.attempt = attempt
        self.should_stop = should_stop
        self.totals = Totals()
        self.first_step = 1
        self.agents = [
            Agent(f"agent-{i}", i, derived_rng(seed, "agent", i).random())
            for i in range(1, config.agents + 1)
        ]
        self.world: dict[str, Any] = {
            "step": 0,
            "entities": len(self.agents),
            "timepoints": 0,
            "inbox": {a.agent_id: [] for a in self.agents},
            "agents": {a.agent_id: {"actions": 0, "tokens": 0, "failures": 0}
                       for a in self.agents},
        }

    def restore(self, totals: Totals, world: dict[str, Any]) -> None:
        """Continue after a checkpoint: its totals and world, from the next step on."""
        self.totals, self.world, self.first_step = totals, world, totals.steps_completed + 1

    def run(self, sink: StepSink) -> Totals:
        """Run every step, committing each to `sink`; raises SimulationFailure."""
        if self.first_step == 1:
            self.totals.entities_created = len(self.agents)
        with ThreadPoolExecutor(self.config.max_concurrency, "agent") as pool:
            for step in range(self.first_step, self.config.steps + 1):
                if self.should_stop():
                    raise Cancelled(step - 1)
                self.check_injected_failure(step)
                result = self._run_step(step, pool)
                self.totals.add(result)
                sink.commit_step(result, self.totals, self.world)
        return self.totals

    def check_injected_failure(self, step: int) -> None:
        """Raise the failure the fault hooks (fail_at_step, fail_attempts) ask for here."""
        cfg = self.config
        if cfg.fail_attempts:  # fail_at_step only says where
            if self.attempt <= cfg.fail_attempts and step == (cfg.fail_at_step or 1):
                raise SimulationFailure("injected_failure", f"injected transient failure at "
                                        f"step {step} (attempt {self.attempt} <= fail_attempts "
                                        f"{cfg.fail_attempts})", transient=True, step=step)
        elif step == cfg.fail_at_step:
            raise SimulationFailure("injected_failure", f"injected failure at step {step} "
                                    "(fail_at_step)", transient=cfg.fail_transient, step=step)

    def order_agents(self, step: int) -> list[Agent]:
        """The step's agent order under the configured strategy (seeded)."""
        agents = list(self.agents)
        if self.config.ordering == "random":
            derived_rng(self.seed, "order", step).shuffle(agents)
        elif self.config.ordering == "priority":
            agents.sort(key=lambda a: (-a.priority, a.index))
        elif self.config.ordering == "round_robin":
            shift = (step - 1) % len(agents)
            agents = agents[shift:] + agents[:shift]
        return agents

    def _run_step(self, step: int, pool: ThreadPoolExecutor) -> StepResult:
        started = time.monotonic()
        deadline = started + self.config.step_timeout_s
        order = self.order_agents(step)
        # PERCEIVE: every agent reads the world before any agent acts.
        inboxes = {a.agent_id: tuple(self.world["inbox"][a.agent_id]) for a in order}
        # ACT: in parallel, bounded by the pool; outputs are buffered.
        futures = [pool.submit(self._act, a, step, inboxes[a.agent_id], deadline) for a in order]
        actions = [f.result() for f in futures]
        judge_tokens, judge_calls = self._judge(step, deadline)
        if time.monotonic() > deadline:
            raise SimulationFailure(
                "step_timeout", f"step {step} took longer than step_timeout_s="
                f"{self.config.step_timeout_s}", transient=True, step=step)
        self._raise_if_fail_fast(step, actions)
        return self._commit(step, actions, judge_tokens, judge_calls, started)

    def _act(self, agent: Agent, step: int, inbox: tuple[str, ...], step_deadline: float
             ) -> AgentAction:
        """The synthetic policy: a plan call, 1-2 dialogue calls, a reply if spoken to."""
        cfg = self.config
        rng = derived_rng(self.seed, "act", step, agent.agent_id)
        deadline = min(time.monotonic() + cfg.agent_timeout_s, step_deadline)
        action = AgentAction(agent.agent_id)
        planned_calls = 1 + rng.randint(1, 2) + (1 if inbox else 0)
        try:
            for call in range(1, planned_calls + 1):
                if not self._call_with_retries(rng, action, call, deadline):
                    action.ok = False
                    return action
        except AgentTimeout:
            action.ok = False
            action.errors.append(f"{agent.agent_id}: timed out after "
                                 f"{min(cfg.agent_timeout_s, cfg.step_timeout_s)} s")
            return action
        others = [a.agent_id for a in self.agents if a.agent_id != agent.agent_id]
        if others:
            action.message_to = rng.choice(others)
            action.message = f"{agent.agent_id}@{step}: proposal-{rng.randint(1000, 9999)}"
        action.creates_entity = rng.random() < ENTITY_CHANCE
        return action

    def _call_with_retries(self, rng: random.Random, action: AgentAction, call: int,
                           deadline: float) -> bool:
        cfg = self.config
        for attempt in range(1, cfg.max_action_retries + 2):
            action.llm_calls += 1
            try:
                action.tokens += simulated_llm_call(
                    rng, cfg.llm_latency_ms, cfg.agent_error_rate, deadline)
                return True
            except LLMCallError as e:
                action.errors.append(f"{action.agent_id}: call {call} try {attempt}: {e}")
        return False

    def _judge(self, step: int, deadline: float) -> tuple[int, int]:
        rng = derived_rng(self.seed, "judge", step)
        tokens = 0
        try:
            for _ in range(self.config.judge_steps):
                tokens += simulated_llm_call(rng, self.config.llm_latency_ms, 0.0, deadline)
        except AgentTimeout:
            pass  # the step deadline check right after reports it
        return tokens, self.config.judge_steps

    def _raise_if_fail_fast(self, step: int, actions: list[AgentAction]) -> None:
        failed = [a for a in actions if not a.ok]
        if failed and self.config.on_agent_error == "fail_fast":
            last = failed[0].errors[-1] if failed[0].errors else "unknown error"
            raise SimulationFailure("agent_error", f"step {step}: {failed[0].agent_id} failed "
                                    f"(on_agent_error=fail_fast): {last}", transient=True,
                                    step=step)

    def _commit(self, step: int, actions: list[AgentAction], judge_tokens: int,
                judge_calls: int, started: float) -> StepResult:
        """COMMIT: apply the buffered actions in order; messages show up next step."""
        inbox: dict[str, list[str]] = {a.agent_id: [] for a in self.agents}
        errors: list[StepError] = []
        entities = 0
        for action in actions:
            stats = self.world["agents"][action.agent_id]
            stats["actions"] += int(action.ok)
            stats["tokens"] += action.tokens
            stats["failures"] += len(action.errors)
            errors.extend(StepError(action.agent_id, m) for m in action.errors)
            if action.ok and action.message_to:
                inbox[action.message_to].append(action.message)
            entities += int(action.ok and action.creates_entity)
        branched = self.config.branching and derived_rng(self.seed, "branch", step).random() < (
            BRANCH_CHANCE)
        tokens = sum(a.tokens for a in actions) + judge_tokens
        result = StepResult(
            step=step,
            duration_ms=int((time.monotonic() - started) * 1000),
            actions=sum(1 for a in actions if a.ok),
            failures=len(errors),
            llm_calls=sum(a.llm_calls for a in actions) + judge_calls,
            tokens=tokens,
            cost_usd=round(tokens * PRICE_PER_1K_TOKENS_USD / 1000, 6),
            entities_created=entities,
            timepoints_created=1 + int(branched),
            errors=tuple(errors),
        )
        self.world.update(step=step, inbox=inbox, entities=self.world["entities"] + entities,
                          timepoints=self.world["timepoints"] + result.timepoints_created)
        return result

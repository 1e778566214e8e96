"""The built-in workload: a deterministic, step-based multi-agent simulation (after ADR-011).

Each step has three phases. PERCEIVE: every agent reads the shared world state
(the messages sent to it in the previous step). ACT: agents act in parallel,
at most `max_concurrency` at once, with a synthetic seeded policy standing in
for the LLM (random token counts, simulated latency, cost = tokens x a fixed
price). COMMIT: the actions are applied in the step's agent order and the step
is handed, with the new world state, to a `StepSink` that stores it atomically.
Every random draw comes from an RNG derived from (seed, step, agent), so the
same seed and config give the same rows whatever the thread timing.

Config keys (`SIMPLE_TEMPLATE_CONFIG`, all optional; unknown keys are ignored):

- `agents` (int, 4), `steps` (int, 5): the simulation's size.
- `mechanisms` (list of str, []): reported as `runs.mechanisms_used`.
- `judged` (bool, false), `judge_steps` (int, 1 when judged): judge LLM calls per step.
- `branching` (bool, false): some steps also create an alternative timepoint.
- `llm_latency_ms` (float, 25): simulated latency of a 1,000-token LLM call.
- `max_concurrency` (int, 4): agents acting at once within a step.
- `ordering` ("sequential" | "random" | "priority" | "round_robin", "random"):
  agent order within a step (seeded); actions are committed in this order.
- `agent_timeout_s` (float, 30), `step_timeout_s` (float, 300): an agent over
  its time fails its action (non-fatal); a step over its time fails the run
  (error type `step_timeout`, transient).
- `on_agent_error` ("log_and_continue" | "fail_fast", "log_and_continue"): what
  an action that failed after its retries does to the run.
- `max_action_retries` (int, 2): retries of a failed simulated LLM call.
- `checkpoint_every_steps` (int, 5; 0 = never), `checkpoint_interval_s` (float,
  30): used by the runtime, see `sandbox_image.runtime`.

Test and fault hooks (used by tests that drive the real runtime):

- `fail_at_step` (int): the run fails when it reaches that step (error type
  `injected_failure`, transient as `fail_transient`, default false).
- `fail_attempts` (int): while `SIMPLE_ATTEMPT` <= this value the run fails
  transiently at `fail_at_step` (or step 1), to exercise controller retries;
  later attempts succeed.
- `exit_code` (int): after the workload (and its `completed` event, snapshot
  and flush) the process exits with this code.
- `memory_mb` (int): allocate and touch this many MiB at start (OOM kill test).
- `sleep_s` (float): sleep this long at start (timeout test); SIGTERM ends it.
- `agent_error_rate` (float 0..1): seeded chance that a simulated LLM call
  fails; the policy retries it, and each failure is an `error` event and
  counts in `steps.failures`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

PRICE_PER_1K_TOKENS_USD = 0.004  # a 6-agent x 7-step template costs about $0.5
TOKENS_PER_CALL = (400, 1600)
ENTITY_CHANCE = 0.3
BRANCH_CHANCE = 0.5
ORDERINGS = ("sequential", "random", "priority", "round_robin")
ERROR_STRATEGIES = ("log_and_continue", "fail_fast")


class ConfigError(ValueError):
    """The template config has a key of the wrong type or out of range."""


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


def _value(config: Mapping[str, Any], key: str, kinds: tuple[type, ...], default: Any) -> Any:
    value = config.get(key, default)
    # bool is an int subclass; a JSON true is never a count.
    if value is not None and (isinstance(value, bool) != (bool in kinds) or
                              not isinstance(value, kinds)):
        names = " or ".join(k.__name__ for k in kinds)
        raise ConfigError(f"config key {key!r} must be {names}, got {value!r}")
    return value


def _number(config: Mapping[str, Any], key: str, default: float, low: float,
            high: float = float("inf"), integer: bool = False) -> Any:
    kinds: tuple[type, ...] = (int,) if integer else (int, float)
    value = _value(config, key, kinds, default)
    if not low <= value <= high:
        raise ConfigError(f"config key {key!r} must be between {low} and {high}, got {value!r}")
    return value


def _choice(config: Mapping[str, Any], key: str, default: str, allowed: tuple[str, ...]) -> str:
    value = _value(config, key, (str,), default)
    if value not in allowed:
        raise ConfigError(f"config key {key!r} must be one of {', '.join(allowed)}, got {value!r}")
    return str(value)


@dataclass(frozen=True)
class SimulationConfig:
    """The template config, checked; see the module docstring for each key."""

    agents: int = 4
    steps: int = 5
    mechanisms: tuple[str, ...] = ()
    judge_steps: int = 0
    branching: bool = False
    llm_latency_ms: float = 25.0
    max_concurrency: int = 4
    ordering: str = "random"
    agent_timeout_s: float = 30.0
    step_timeout_s: float = 300.0
    on_agent_error: str = "log_and_continue"
    max_action_retries: int = 2
    checkpoint_every_steps: int = 5
    checkpoint_interval_s: float = 30.0
    fail_at_step: int | None = None
    fail_transient: bool = False
    fail_attempts: int = 0
    exit_code: int | None = None
    memory_mb: int = 0
    sleep_s: float = 0.0
    agent_error_rate: float = 0.0

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> SimulationConfig:
        """Check `config`; raises ConfigError naming the key at fault."""
        mechanisms = _value(config, "mechanisms", (list,), [])
        if not all(isinstance(m, str) for m in mechanisms):
            raise ConfigError(f"config key 'mechanisms' must be a list of strings: {mechanisms!r}")
        judged = _value(config, "judged", (bool,), False)
        return cls(
            agents=_number(config, "agents", 4, 1, 10_000, integer=True),
            steps=_number(config, "steps", 5, 1, 1_000_000, integer=True),
            mechanisms=tuple(mechanisms),
            judge_steps=_number(config, "judge_steps", 1, 0, 1000, integer=True) if judged else 0,
            branching=_value(config, "branching", (bool,), False),
            llm_latency_ms=float(_number(config, "llm_latency_ms", 25.0, 0, 600_000)),
            max_concurrency=_number(config, "max_concurrency", 4, 1, 1024, integer=True),
            ordering=_choice(config, "ordering", "random", ORDERINGS),
            agent_timeout_s=float(_number(config, "agent_timeout_s", 30.0, 0.001)),
            step_timeout_s=float(_number(config, "step_timeout_s", 300.0, 0.001)),
            on_agent_error=_choice(config, "on_agent_error", "log_and_continue", ERROR_STRATEGIES),
            max_action_retries=_number(config, "max_action_retries", 2, 0, 100, integer=True),
            checkpoint_every_steps=_number(config, "checkpoint_every_steps", 5, 0, integer=True),
            checkpoint_interval_s=float(_number(config, "checkpoint_interval_s", 30.0, 0)),
            fail_at_step=_value(config, "fail_at_step", (int,), None),
            fail_transient=_value(config, "fail_transient", (bool,), False),
            fail_attempts=_number(config, "fail_attempts", 0, 0, integer=True),
            exit_code=_value(config, "exit_code", (int,), None),
            memory_mb=_number(config, "memory_mb", 0, 0, integer=True),
            sleep_s=float(_number(config, "sleep_s", 0.0, 0)),
            agent_error_rate=float(_number(config, "agent_error_rate", 0.0, 0, 1)),
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

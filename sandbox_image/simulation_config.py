"""The built-in workload's template config (`SIMPLE_TEMPLATE_CONFIG`), checked into a
`SimulationConfig`; a key of the wrong type or out of range raises `ConfigError` naming it.

Config keys (all optional; unknown keys are ignored):

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

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ORDERINGS = ("sequential", "random", "priority", "round_robin")
ERROR_STRATEGIES = ("log_and_continue", "fail_fast")


class ConfigError(ValueError):
    """The template config has a key of the wrong type or out of range."""


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

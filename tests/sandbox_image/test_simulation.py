"""The built-in workload: determinism, ordering, config checks, errors and hooks."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from sandbox_image.simulation import (
    PRICE_PER_1K_TOKENS_USD,
    Cancelled,
    Simulation,
    SimulationFailure,
    StepResult,
    Totals,
)
from sandbox_image.simulation_config import ConfigError, SimulationConfig


class ListSink:
    """Keeps every committed step, the totals after it and a copy of the world."""

    def __init__(self) -> None:
        self.steps: list[StepResult] = []
        self.totals: list[Totals] = []
        self.worlds: list[dict[str, Any]] = []

    def commit_step(self, result: StepResult, totals: Totals, world: dict[str, Any]) -> None:
        self.steps.append(result)
        self.totals.append(dataclasses.replace(totals))
        self.worlds.append(copy.deepcopy(world))

    def rows(self) -> list[dict[str, Any]]:
        """The step rows without their (timing-dependent) durations."""
        return [{k: v for k, v in dataclasses.asdict(s).items() if k != "duration_ms"}
                for s in self.steps]


def simulate(seed: int = 7, attempt: int = 1, **config: Any) -> tuple[Totals, ListSink]:
    config.setdefault("llm_latency_ms", 1)
    sink = ListSink()
    sim = Simulation(SimulationConfig.from_mapping(config), seed=seed, attempt=attempt)
    return sim.run(sink), sink


def test_same_seed_and_config_give_identical_rows() -> None:
    first, sink1 = simulate(agents=5, steps=4, ordering="random", agent_error_rate=0.2)
    second, sink2 = simulate(agents=5, steps=4, ordering="random", agent_error_rate=0.2)
    assert first == second
    assert sink1.rows() == sink2.rows()
    assert sink1.worlds == sink2.worlds


def test_concurrency_changes_timing_not_results() -> None:
    _, serial = simulate(agents=6, steps=3, max_concurrency=1)
    _, parallel = simulate(agents=6, steps=3, max_concurrency=6)
    assert serial.rows() == parallel.rows()
    assert serial.worlds == parallel.worlds


def test_another_seed_gives_other_results() -> None:
    assert simulate(seed=1)[0] != simulate(seed=2)[0]


def test_totals_add_up_and_are_plausible() -> None:
    totals, sink = simulate(agents=6, steps=7, mechanisms=["M1", "M3"])
    assert totals.steps_completed == 7 and len(sink.steps) == 7
    assert [s.step for s in sink.steps] == list(range(1, 8))
    assert totals.tokens_used == sum(s.tokens for s in sink.steps)
    assert totals.llm_calls == sum(s.llm_calls for s in sink.steps) >= 6 * 7 * 2
    assert totals.cost_usd == pytest.approx(sum(s.cost_usd for s in sink.steps))
    assert totals.cost_usd == pytest.approx(totals.tokens_used * PRICE_PER_1K_TOKENS_USD / 1000)
    assert 0.2 < totals.cost_usd < 1.2  # about half a dollar for a 6 x 7 template
    assert totals.entities_created >= 6 and totals.timepoints_created == 7
    assert all(s.actions == 6 and s.failures == 0 for s in sink.steps)


def test_messages_sent_in_a_step_are_perceived_in_the_next() -> None:
    _, sink = simulate(agents=3, steps=2)
    inbox = sink.worlds[0]["inbox"]
    assert sum(len(m) for m in inbox.values()) == 3  # each agent wrote to one other
    assert all(msg.split("@")[1].startswith("1:") for m in inbox.values() for msg in m)
    assert sink.worlds[1]["step"] == 2


def test_ordering_strategies() -> None:
    def order(ordering: str, step: int, seed: int = 7) -> list[str]:
        sim = Simulation(SimulationConfig(agents=5, ordering=ordering), seed=seed)
        return [a.agent_id for a in sim.order_agents(step)]

    ids = [f"agent-{i}" for i in range(1, 6)]
    assert order("sequential", 1) == order("sequential", 2) == ids
    assert order("round_robin", 2) == ids[1:] + ids[:1]
    assert sorted(order("random", 1)) == ids and order("random", 1) == order("random", 1)
    assert len({tuple(order("random", s)) for s in range(1, 8)}) > 1
    sim = Simulation(SimulationConfig(agents=5, ordering="priority"), seed=7)
    by_priority = sorted(sim.agents, key=lambda a: -a.priority)
    assert order("priority", 1) == order("priority", 5) == [a.agent_id for a in by_priority]


def test_judged_templates_make_extra_calls() -> None:
    plain, _ = simulate(agents=3, steps=3)
    judged, _ = simulate(agents=3, steps=3, judged=True, judge_steps=2)
    assert judged.llm_calls == plain.llm_calls + 3 * 2
    assert judged.tokens_used > plain.tokens_used


def test_branching_creates_extra_timepoints() -> None:
    totals, _ = simulate(agents=2, steps=20, branching=True)
    assert 20 < totals.timepoints_created < 40


def test_agent_errors_are_retried_counted_and_reported() -> None:
    totals, sink = simulate(agents=4, steps=5, agent_error_rate=0.3)
    failures = sum(s.failures for s in sink.steps)
    assert failures > 0
    assert failures == sum(len(s.errors) for s in sink.steps)
    assert all(e.message.startswith(e.agent_id) for s in sink.steps for e in s.errors)
    assert totals.steps_completed == 5


def test_always_failing_agents_do_not_act() -> None:
    _, sink = simulate(agents=2, steps=1, agent_error_rate=1.0, max_action_retries=1)
    assert sink.steps[0].actions == 0 and sink.steps[0].failures == 2 * 2


def test_fail_fast_turns_an_agent_error_into_a_failure() -> None:
    with pytest.raises(SimulationFailure) as info:
        simulate(agents=2, steps=2, agent_error_rate=1.0, on_agent_error="fail_fast")
    assert info.value.error_type == "agent_error" and info.value.step == 1


def test_agent_timeout_fails_the_action_not_the_run() -> None:
    _, sink = simulate(agents=2, steps=1, llm_latency_ms=400, agent_timeout_s=0.05)
    assert sink.steps[0].actions == 0 and sink.steps[0].failures == 2
    assert "timed out" in sink.steps[0].errors[0].message


def test_step_timeout_fails_the_run() -> None:
    with pytest.raises(SimulationFailure) as info:
        simulate(agents=2, steps=2, llm_latency_ms=400, step_timeout_s=0.05)
    assert info.value.error_type == "step_timeout" and info.value.transient


def test_fail_at_step_hook() -> None:
    sink = ListSink()
    config = SimulationConfig.from_mapping({"steps": 5, "fail_at_step": 3, "llm_latency_ms": 1})
    with pytest.raises(SimulationFailure) as info:
        Simulation(config, seed=1).run(sink)
    assert (info.value.error_type, info.value.step, info.value.transient) == (
        "injected_failure", 3, False)
    assert len(sink.steps) == 2  # the steps before it were committed


def test_fail_attempts_hook_fails_only_early_attempts() -> None:
    config = {"steps": 2, "fail_attempts": 2}
    for attempt in (1, 2):
        with pytest.raises(SimulationFailure) as info:
            simulate(attempt=attempt, **config)
        assert info.value.transient and info.value.step == 1
    assert simulate(attempt=3, **config)[0].steps_completed == 2
    with pytest.raises(SimulationFailure) as info:
        simulate(attempt=1, steps=3, fail_attempts=1, fail_at_step=3)
    assert info.value.step == 3 and info.value.transient
    assert simulate(attempt=2, steps=3, fail_attempts=1, fail_at_step=3)[0].steps_completed == 3


def test_stop_request_cancels_at_a_step_boundary() -> None:
    sink = ListSink()
    sim = Simulation(SimulationConfig(steps=5, llm_latency_ms=1), seed=1,
                     should_stop=lambda: len(sink.steps) >= 2)
    with pytest.raises(Cancelled) as info:
        sim.run(sink)
    assert info.value.step == 2 and not info.value.transient
    assert info.value.error_type == "cancelled"


def test_config_defaults() -> None:
    config = SimulationConfig.from_mapping({})
    assert (config.agents, config.steps, config.ordering, config.max_concurrency) == (
        4, 5, "random", 4)
    assert config.llm_latency_ms == 25 and config.judge_steps == 0
    assert SimulationConfig.from_mapping({"judged": True}).judge_steps == 1
    assert SimulationConfig.from_mapping({"unknown": 1}).agents == 4


@pytest.mark.parametrize(("config", "key"), [
    ({"agents": "6"}, "agents"),
    ({"agents": True}, "agents"),
    ({"steps": 0}, "steps"),
    ({"ordering": "alphabetical"}, "ordering"),
    ({"mechanisms": ["M1", 2]}, "mechanisms"),
    ({"judged": 1}, "judged"),
    ({"agent_error_rate": 1.5}, "agent_error_rate"),
])
def test_config_errors_name_the_key(config: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError, match=repr(key)):
        SimulationConfig.from_mapping(config)

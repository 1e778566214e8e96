"""Staged runs: a list of stages, each a set of templates with a policy.

Stage N+1 starts only when stage N has settled (every sandbox ended) and met
its policy: `all` (every sandbox succeeded), `{quorum: k}` (at least k did) or
`best_effort` (whatever happened). When a policy is not met, the later stages
are skipped with the reason. Pure: values and rules, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from controller.states import ACTIVE_SANDBOX, SandboxStatus

MAX_STAGES = 32


class PolicyKind(StrEnum):
    ALL = "all"
    BEST_EFFORT = "best_effort"
    QUORUM = "quorum"


@dataclass(frozen=True)
class Policy:
    """When a stage counts as done well enough for the next one to start."""

    kind: PolicyKind
    quorum: int | None = None

    def public(self) -> str | dict[str, int]:
        """As written in YAML and JSON: "all", "best_effort" or {"quorum": k}."""
        if self.kind is PolicyKind.QUORUM:
            return {"quorum": int(self.quorum or 0)}
        return self.kind.value

    def describe(self) -> str:
        return f"quorum {self.quorum}" if self.kind is PolicyKind.QUORUM else self.kind.value

    def met(self, succeeded: int, total: int) -> bool:
        if self.kind is PolicyKind.ALL:
            return succeeded == total
        if self.kind is PolicyKind.QUORUM:
            return succeeded >= (self.quorum or 0)
        return True


def parse_policy(value: object) -> Policy:
    """`all`, `best_effort` or `{quorum: k}`; ValueError saying what is accepted."""
    if value in ("all", "best_effort"):
        return Policy(PolicyKind(str(value)))
    if isinstance(value, dict) and set(value) == {"quorum"}:
        k = value["quorum"]
        if isinstance(k, int) and not isinstance(k, bool) and k >= 1:
            return Policy(PolicyKind.QUORUM, k)
    raise ValueError(f"policy must be all, best_effort or {{quorum: k}} with k >= 1, got {value!r}")


@dataclass(frozen=True)
class Stage:
    """One stage: its templates (launched together) and its policy."""

    templates: tuple[str, ...]
    policy: Policy

    def public(self) -> dict[str, Any]:
        return {"templates": list(self.templates), "policy": self.policy.public()}


class StageModel(BaseModel):
    """One stage as written in a catalog file or a request body."""

    model_config = ConfigDict(extra="forbid")
    templates: list[str] = Field(default_factory=list, description="Template ids of the stage")
    suites: list[str] = Field(default_factory=list, description="Suites whose templates join it")
    policy: Any = Field("all", description='"all", "best_effort" or {"quorum": k}')

    @field_validator("policy")
    @classmethod
    def _policy(cls, value: object) -> object:
        parse_policy(value)
        return value


class StagedSuiteModel(BaseModel):
    """A suite written as `{stages: [...]}`."""

    model_config = ConfigDict(extra="forbid")
    stages: list[StageModel] = Field(min_length=1, max_length=MAX_STAGES)


def check_stages(stages: Sequence[Stage], where: str) -> None:
    """Every stage non-empty, a template in one stage only, a quorum it can reach."""
    seen: dict[str, int] = {}
    for index, stage in enumerate(stages):
        if not stage.templates:
            raise ValueError(f"{where}: stage {index} has no templates")
        for template_id in stage.templates:
            if template_id in seen:
                raise ValueError(
                    f"{where}: template {template_id!r} is in stage {seen[template_id]} and "
                    f"stage {index}; a template runs once per run"
                )
            seen[template_id] = index
        quorum = stage.policy.quorum
        if quorum is not None and quorum > len(stage.templates):
            raise ValueError(
                f"{where}: stage {index} has {len(stage.templates)} templates, "
                f"fewer than its quorum {quorum}"
            )


@dataclass(frozen=True)
class Settlement:
    """Where a stage stands: still going, met its policy, or failed it (and why)."""

    settled: bool
    met: bool
    reason: str | None = None


def settle(index: int, policy: Policy, statuses: Sequence[str]) -> Settlement:
    """Has stage `index`, whose sandboxes are in `statuses`, settled, and met its policy?"""
    if any(s in ACTIVE_SANDBOX for s in statuses):
        return Settlement(False, False)
    succeeded = sum(1 for s in statuses if s == SandboxStatus.SUCCEEDED)
    if policy.met(succeeded, len(statuses)):
        return Settlement(True, True)
    return Settlement(
        True,
        False,
        f"stage {index} did not meet its policy ({policy.describe()}): "
        f"{succeeded} of {len(statuses)} sandboxes succeeded",
    )


def stages_from_plan(plan: dict[str, Any]) -> list[Stage]:
    """The stages a run's stored plan holds ([] for a flat run)."""
    return [
        Stage(tuple(s["templates"]), parse_policy(s["policy"])) for s in plan.get("stages") or []
    ]


def stage_summary(
    plan: dict[str, Any], sandboxes: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """A staged run's sandboxes grouped by stage, with where each stage stands. Pure."""
    summary = []
    for index, stage in enumerate(stages_from_plan(plan)):
        members = [s for s in sandboxes if s.get("stage", 0) == index]
        statuses = [s["status"] for s in members]
        result = settle(index, stage.policy, statuses)
        if all(s == SandboxStatus.SKIPPED for s in statuses):
            state = "skipped"
        elif not result.settled:
            started = any(s != SandboxStatus.PENDING for s in statuses)
            state = "running" if started else "waiting"
        else:
            state = "met" if result.met else "not_met"
        summary.append(
            {
                "index": index,
                "policy": stage.policy.public(),
                "status": state,
                "succeeded": statuses.count(SandboxStatus.SUCCEEDED),
                "sandboxes": [s["sandbox_id"] for s in members],
                "reason": result.reason,
            }
        )
    return summary

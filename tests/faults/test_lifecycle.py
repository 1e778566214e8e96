"""The sandbox lifecycle as a hypothesis state machine: launches, events, exits, timeouts,
vanishings, cancels and controller restarts in any order, on the real reconciler,
launcher, finisher and ingest (SQLite, an in-memory backend, a fake clock).

Invariants after every step: a terminal state never changes; attempts never decrease;
an attempt's token dies with it (a later attempt's or an ended sandbox's old token gets
401 for a new event); and a run ends only when every sandbox has.
"""

from __future__ import annotations

import random
import secrets
from concurrent.futures import Future
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy import select

from controller.backends.base import Backend, Observed, ObservedState, SandboxSpec
from controller.catalog.templates import load_catalog
from controller.db.engine import create_db_engine, upgrade
from controller.db.schema import runs, sandboxes
from controller.intake.event_batch import EventRequest, IncomingEvent
from controller.intake.ingest import write_group
from controller.planning.model import PlanRequest
from controller.reconcile.reconciler import Reconciler
from controller.runs import cancel_run, create_run
from controller.settings import Settings
from controller.store.local import LocalStore
from sandbox_image.contract import EventType

pytestmark = [pytest.mark.faults, pytest.mark.once]

TERMINAL = {"succeeded", "failed", "timeout", "oom", "cancelled", "lost", "skipped"}
T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


class FakeBackend(Backend):
    """Sandboxes as dictionary entries; the test decides when they exit or vanish."""

    name = "fake"

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[str, Observed] = {}
        self.tokens: dict[tuple[str, int], str] = {}

    def launch(self, spec: SandboxSpec) -> None:
        env = spec.env
        self.live[env.sandbox_id] = Observed(env.sandbox_id, env.run_id, env.attempt,
                                             ObservedState.RUNNING)
        self.tokens[(env.sandbox_id, env.attempt)] = env.sandbox_token

    def observe(self) -> list[Observed]:
        return list(self.live.values())

    def stop(self, sandbox_id: str) -> None:
        seen = self.live.get(sandbox_id)
        if seen is not None and seen.state != ObservedState.EXITED:
            self.live[sandbox_id] = replace(seen, state=ObservedState.EXITED, exit_code=143)

    def read_logs(self, sandbox_id: str) -> bytes:
        return b""

    def remove(self, sandbox_id: str) -> None:
        self.live.pop(sandbox_id, None)

    def render(self, spec: SandboxSpec) -> dict[str, Any]:
        return {}

    def check(self) -> None:
        return None

    def exit(self, sandbox_id: str, code: int) -> None:
        seen = self.live.get(sandbox_id)
        if seen is not None and seen.state == ObservedState.RUNNING:
            self.live[sandbox_id] = replace(seen, state=ObservedState.EXITED, exit_code=code)


class Inline:
    """An executor that runs work at once, so a pass is deterministic."""

    def submit(self, fn: Any, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as e:  # as a pool would: kept in the future
            future.set_exception(e)
        return future

    def shutdown(self, wait: bool = True) -> None:
        return None


class Lifecycle(RuleBasedStateMachine):
    """One run of three sandboxes through whatever order of events hypothesis picks."""

    def __init__(self) -> None:
        super().__init__()
        directory = Path(TMP) / secrets.token_hex(4)
        directory.mkdir(parents=True)
        self.settings = Settings(data_dir=directory, database_url=f"sqlite:///{directory}/s.db",
                                 max_attempts=3, retry_base_s=1.0, retry_max_s=4.0,
                                 lost_grace_s=5.0)
        self.engine = create_db_engine(self.settings.resolved_database_url)
        upgrade(self.engine)
        self.store = LocalStore(directory / "store")
        self.backend = FakeBackend()
        self.now = T0
        self.reconciler = self._new_reconciler()
        names = ["board_meeting", "kami_shrine", "vc_pitch_pearl"]
        self.run_id, _ = create_run(self.engine, CATALOG, PlanRequest(templates=tuple(names)),
                                    {"templates": names}, backend="fake",
                                    default_image="simple-sandbox:test")
        self.seen_terminal: dict[str, str] = {}
        self.seen_attempts: dict[str, int] = {}
        self.seq = 0

    def _new_reconciler(self) -> Reconciler:
        reconciler = Reconciler(self.engine, self.backend, self.store, self.settings,
                                clock=lambda: self.now, rng=random.Random(0),
                                background=Inline())  # type: ignore[arg-type]
        reconciler.exits._finish_pool = Inline()  # type: ignore[assignment]
        reconciler.exits._cleanup_pool = Inline()  # type: ignore[assignment]
        return reconciler

    def _rows(self) -> list[Any]:
        with self.engine.connect() as conn:
            return list(conn.execute(select(sandboxes).where(sandboxes.c.run_id == self.run_id)))

    def _post(self, sandbox_id: str, token: str, kind: EventType,
              data: dict[str, Any]) -> int:
        self.seq += 1
        event = IncomingEvent(f"e{self.seq}", self.seq, kind, self.now, data)
        request = EventRequest(sandbox_id, f"Bearer {token}", [event])
        with self.engine.begin() as conn:
            write_group(conn, [request])
        return 200 if request.error is None else request.error.status_code

    @rule()
    def reconcile(self) -> None:
        self.reconciler.reconcile_once()

    @rule(seconds=st.sampled_from([0.5, 3.0, 10.0, 2000.0]))
    def time_passes(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    @rule(which=st.integers(0, 2), code=st.sampled_from([0, 1, 137]))
    def a_sandbox_exits(self, which: int, code: int) -> None:
        live = sorted(self.backend.live)
        if live:
            self.backend.exit(live[which % len(live)], code)

    @rule(which=st.integers(0, 2))
    def a_sandbox_vanishes(self, which: int) -> None:
        live = sorted(self.backend.live)
        if live:
            self.backend.live.pop(live[which % len(live)])

    @rule(which=st.integers(0, 2), kind=st.sampled_from(list(EventType)),
          transient=st.booleans())
    def a_sandbox_reports(self, which: int, kind: EventType, transient: bool) -> None:
        running = [r for r in self._rows() if r.status == "running"]
        if not running:
            return
        row = running[which % len(running)]
        token = self.backend.tokens.get((row.id, row.attempt))
        if token is None:
            return
        data: dict[str, Any] = {"step": 1, "cost_usd": 0.01}
        if kind is EventType.FAILED:
            data["error"] = {"type": "Boom", "message": "x", "transient": transient}
        assert self._post(row.id, token, kind, data) == 200

    @rule()
    def cancel(self) -> None:
        cancel_run(self.engine, self.run_id)

    @rule()
    def controller_restarts(self) -> None:
        self.reconciler.stop()
        self.reconciler = self._new_reconciler()

    @invariant()
    def terminal_never_changes_and_attempts_never_decrease(self) -> None:
        for row in self._rows():
            before = self.seen_terminal.get(row.id)
            assert before is None or row.status == before, (row.id, before, row.status)
            if row.status in TERMINAL:
                self.seen_terminal[row.id] = row.status
            assert row.attempt >= self.seen_attempts.get(row.id, 0)
            self.seen_attempts[row.id] = row.attempt

    @invariant()
    def an_attempts_token_dies_with_it(self) -> None:
        rows = {r.id: r for r in self._rows()}
        for (sandbox_id, attempt), token in self.backend.tokens.items():
            row = rows[sandbox_id]
            if row.attempt == attempt and row.status == "running":
                continue
            code = self._post(sandbox_id, token, EventType.PROGRESS, {"step": 99})
            assert code == 401, (sandbox_id, attempt, row.attempt, row.status, code)

    @invariant()
    def a_run_ends_only_when_every_sandbox_has(self) -> None:
        with self.engine.connect() as conn:
            status = conn.execute(select(runs.c.status).where(runs.c.id == self.run_id)).scalar()
        if status not in ("pending", "running"):
            assert all(r.status in TERMINAL for r in self._rows())

    def teardown(self) -> None:
        self.reconciler.stop()
        self.engine.dispose()


CATALOG: Any = None
TMP = ""


def test_sandbox_lifecycle_state_machine(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    from tests.faults.conftest import record_case

    global CATALOG, TMP
    CATALOG = load_catalog([Settings().builtin_catalog_dir])
    TMP = str(tmp_path)
    run_state_machine_as_test(Lifecycle, settings=settings(
        max_examples=25, stateful_step_count=25, deadline=None,
        # no shrinking: wall-clock parts of the controller make shrunk replays drift
        phases=[Phase.explicit, Phase.reuse, Phase.generate],
        suppress_health_check=list(HealthCheck)))
    record_case(request, "broke: launches, events, exits, vanishings, timeouts, cancels and "
                "controller restarts in random order (25 runs x 25 steps); held: terminal "
                "states never changed, attempts never decreased, old tokens got 401")

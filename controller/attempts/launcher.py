"""Launching one attempt of a sandbox: new token, upload URL, row first, then the backend."""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from sqlalchemy import Connection, Engine, bindparam, func, insert, update

from controller import metrics
from controller.attempts.finisher import Finisher, Outcome
from controller.attempts.inputs import prepare_inputs
from controller.attempts.urls import AttemptUrls
from controller.backends.base import Backend, Resources, SandboxSpec
from controller.db.schema import attempts, sandboxes
from controller.errors import BackendError, SimpleError, StoreError
from controller.intake.tokens import hash_token, new_token
from controller.logs import log_context
from controller.settings import Settings
from controller.states import SandboxStatus
from controller.store.base import ObjectStore
from sandbox_image.contract import SandboxEnv

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Claim:
    """An attempt marked running in the database, to be started by the backend."""

    row: Any
    spec: SandboxSpec


class Launcher:
    """Claims attempts in the database, then has the backend start them, with the URLs
    `urls` makes; a launch that fails is ended by `finisher`."""

    def __init__(
        self,
        engine: Engine,
        backend: Backend,
        store: ObjectStore,
        settings: Settings,
        urls: AttemptUrls,
        finisher: Finisher,
    ) -> None:
        self.engine, self.backend, self.store, self.settings = engine, backend, store, settings
        self.urls, self.finisher = urls, finisher

    def claim(self, run: Any, row: Any, now: datetime) -> Claim | None:
        """Mark the next attempt running in the database (fast); None if already claimed."""
        claims = self.claim_many(run, [row], now)
        return claims[0] if claims else None

    def claim_many(self, run: Any, rows: Sequence[Any], now: datetime) -> list[Claim]:
        """Claim several sandboxes of a run in one transaction; those already claimed (or
        refused) are left out."""
        prepared = []
        for row in rows:
            token = new_token()
            token_hash = hash_token(token)
            try:  # the upload URL may need the store (presigning): fail here, not half-launched
                spec = self.build_spec(run.id, row, row.attempt + 1, token, token_hash)
            except SimpleError as e:
                self._refuse(row, now, f"cannot prepare the sandbox: {e}")
                continue
            prepared.append((row, spec, token_hash))
        claims = []
        with self.engine.begin() as conn:
            for row, spec, token_hash in prepared:
                if _claim_row(conn, row, token_hash, now):
                    claims.append(Claim(_claimed(row, token_hash, now), spec))
        return claims

    def _refuse(self, row: Any, now: datetime, error: str) -> None:
        logger.warning("sandbox %s not launched: %s", row.id, error)
        with self.engine.begin() as conn:
            conn.execute(
                update(sandboxes)
                .where(sandboxes.c.id == row.id, sandboxes.c.status == SandboxStatus.PENDING)
                .values(status=SandboxStatus.FAILED, error=error, finished_at=now)
            )

    def start(self, claim: Claim, now: datetime, rng: random.Random) -> bool:
        """Prepare the attempt's inputs and ask the backend to start it; a refusal ends it."""
        row = claim.row
        with log_context(run_id=row.run_id, sandbox_id=row.id, attempt=row.attempt):
            return self._start(claim, now, rng)

    def _start(self, claim: Claim, now: datetime, rng: random.Random) -> bool:
        row = claim.row
        try:
            spec = self._with_inputs(claim)
            self.backend.launch(spec)
            metrics.LAUNCH_LATENCY.observe(max((datetime.now(UTC) - now).total_seconds(), 0.0))
        except (BackendError, StoreError) as e:
            if isinstance(e, BackendError):
                metrics.backend_error(self.backend, "launch")
            logger.warning("launch of sandbox %s attempt %d failed: %s", row.id, row.attempt, e)
            failed = Outcome(
                SandboxStatus.FAILED, None, f"launch failed: {e}", transient=e.transient
            )
            self.finisher.finish(row, failed, now, rng)
            return False
        return True

    def _with_inputs(self, claim: Claim) -> SandboxSpec:
        """The spec with SIMPLE_ITEMS_URL / SIMPLE_RESUME_URL, recorded on the attempt."""
        row, spec = claim.row, claim.spec
        if not row.spec.get("items") and row.attempt == 1:
            return spec
        inputs = prepare_inputs(
            self.store, self.urls, self.settings, row, row.attempt, row.token_hash
        )
        checkpoint = inputs.checkpoint
        with self.engine.begin() as conn:
            conn.execute(
                update(attempts)
                .where(attempts.c.sandbox_id == row.id, attempts.c.attempt == row.attempt)
                .values(resumed_from_step=checkpoint.step if checkpoint else None,
                        resume_note=inputs.note)
            )
            if checkpoint is not None:  # the resumed attempt reports the restored cost again
                conn.execute(
                    update(sandboxes)
                    .where(sandboxes.c.id == row.id, sandboxes.c.attempt == row.attempt)
                    .values(prior_cost_usd=func.max(
                        sandboxes.c.prior_cost_usd - checkpoint.cost_usd, 0.0)
                        if conn.dialect.name == "sqlite" else func.greatest(
                        sandboxes.c.prior_cost_usd - checkpoint.cost_usd, 0.0))
                )
        env = replace(spec.env, items_url=inputs.items_url, resume_url=inputs.resume_url)
        return replace(spec, env=env)

    def build_spec(
        self, run_id: str, row: Any, attempt: int, token: str, token_hash: str
    ) -> SandboxSpec:
        timeout_s = row.spec["timeout_s"]
        url = self.urls.snapshot(run_id, row.id, attempt, token_hash, timeout_s)
        stage = getattr(row, "stage", 0) or 0
        input_url = (
            self.urls.input("stage", run_id, row.id, attempt, token_hash, timeout_s, stage)
            if stage > 0
            else None
        )
        return build_sandbox_spec(
            run_id,
            row.id,
            row.template_id,
            row.spec,
            attempt,
            token,
            url,
            self.settings.resolved_controller_url,
            self.settings.controller_id,
            input_url=input_url,
        )


# The claim's statements, built once (building a 20-column UPDATE costs more than
# running it); each claim binds its row's values.
_CLAIM = (
    update(sandboxes)
    .where(
        sandboxes.c.id == bindparam("b_id"),
        sandboxes.c.status == SandboxStatus.PENDING,
        sandboxes.c.attempt == bindparam("b_attempt"),
    )
    .values(
        status=SandboxStatus.RUNNING,
        attempt=bindparam("b_next"),
        token_hash=bindparam("b_token_hash"),
        launched_at=bindparam("b_now"),
        started_at=None,
        finished_at=None,
        stop_reason=None,
        exit_code=None,
        error=None,
        transient=None,
        step=None,
        steps_total=None,
        last_seq=0,  # a new attempt numbers its events from 1 again
        prior_cost_usd=bindparam("b_prior_cost"),
        cost_usd=0.0,
        tokens=0,
        aggregated=False,
        next_attempt_at=None,
    )
)
_NEW_ATTEMPT = insert(attempts).values(
    sandbox_id=bindparam("b_id"),
    attempt=bindparam("b_next"),
    status=SandboxStatus.RUNNING,
    started_at=bindparam("b_now"),
)


def _claim_row(conn: Connection, row: Any, token_hash: str, now: datetime) -> bool:
    """The row's next attempt marked running, if it is still pending at its attempt."""
    values = {
        "b_id": row.id,
        "b_attempt": row.attempt,
        "b_next": row.attempt + 1,
        "b_token_hash": token_hash,
        "b_now": now,
        "b_prior_cost": row.prior_cost_usd + row.cost_usd,
    }
    claimed = conn.execute(_CLAIM, values).rowcount
    if claimed:
        conn.execute(_NEW_ATTEMPT, {k: values[k] for k in ("b_id", "b_next", "b_now")})
    return bool(claimed)


def _claimed(row: Any, token_hash: str, now: datetime) -> Any:
    """The row as it reads once claimed."""
    return SimpleNamespace(
        **{
            **row._asdict(),
            "status": SandboxStatus.RUNNING,
            "attempt": row.attempt + 1,
            "token_hash": token_hash,
            "launched_at": now,
            "last_seq": 0,
            "cost_usd": 0.0,
            "tokens": 0,
            "prior_cost_usd": row.prior_cost_usd + row.cost_usd,
            "stop_reason": None,
            "error": None,
            "transient": None,
        }
    )


def build_sandbox_spec(
    run_id: str,
    sandbox_id: str,
    template_id: str,
    spec: dict[str, Any],
    attempt: int,
    token: str,
    snapshot_url: str,
    controller_url: str,
    controller_id: str = "",
    input_url: str | None = None,
) -> SandboxSpec:
    """The backend-neutral description of one attempt. Pure."""
    env = SandboxEnv(
        sandbox_id=sandbox_id,
        run_id=run_id,
        template_id=template_id,
        attempt=attempt,
        template_config=spec["config"],
        seed=spec["seed"],
        controller_url=controller_url,
        sandbox_token=token,
        snapshot_url=snapshot_url,
        input_url=input_url,
    )
    return SandboxSpec(
        env=env,
        image=spec["image"],
        command=tuple(spec["command"]),
        timeout_s=spec["timeout_s"],
        resources=Resources(
            cpu=spec["resources"].get("cpu"), memory=spec["resources"].get("memory")
        ),
        controller_id=controller_id,
        secrets=tuple((n, k, a) for n, k, a in spec.get("secrets", ())),
        log_stop=spec.get("on_log_budget") == "stop",
    )

"""Runs: create (idempotently), read, list and cancel. The reconciler does the rest."""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import zlib
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from controller.catalog.batches import WorkItem, items_jsonl
from controller.catalog.stages import stage_summary
from controller.catalog.templates import Catalog, Template
from controller.db.plans import run_with_plan, select_runs, with_plans
from controller.db.schema import runs, sandboxes
from controller.errors import ConflictError, InputError, NotFoundError
from controller.planning.model import Plan, PlanRequest
from controller.planning.plan import plan
from controller.results.estimates import planning_catalog
from controller.results.report import attempt_rows
from controller.states import ACTIVE_RUN, RunStatus, SandboxStatus
from controller.store.base import ObjectStore, items_key
from sandbox_image.contract import SANDBOX_ID_MAX_LENGTH

DEFAULT_COMMAND = ("python", "-m", "sandbox_image")


def new_run_id() -> str:
    return "run-" + secrets.token_hex(4)


def sandbox_id_for(run_id: str, template_id: str, position: int, batch: int | None = None
                   ) -> str:
    """`<run hex>-<template with dashes>[-b<batch>]`, at most 63 characters, unique in the run."""
    slug = re.sub(r"[^a-z0-9-]", "-", template_id.lower()).strip("-")
    if batch is not None:
        slug = f"{slug}-b{batch}"
    candidate = f"{run_id.removeprefix('run-')}-{slug}"
    if len(candidate) <= SANDBOX_ID_MAX_LENGTH:
        return candidate
    digest = hashlib.sha256(f"{template_id}:{position}:{batch}".encode()).hexdigest()[:6]
    return f"{candidate[: SANDBOX_ID_MAX_LENGTH - 7].rstrip('-')}-{digest}"


def sandbox_spec(template: Template, seed: int, default_image: str) -> dict[str, Any]:
    """What the sandbox row keeps of its template: enough to relaunch it after a restart."""
    config = dict(template.config)
    config.setdefault("mechanisms", list(template.mechanisms))
    if template.entrypoint:
        config["entrypoint"] = template.entrypoint
    stop = {"on_log_budget": "stop"} if template.on_log_budget == "stop" else {}
    return {
        **stop,
        "image": template.image or default_image,
        "command": list(template.command or DEFAULT_COMMAND),
        "config": config,
        "timeout_s": template.timeout_s,
        "estimate_min_usd": template.cost_usd[0],
        "estimate_max_usd": template.cost_usd[1],
        "estimate_runtime_s": list(template.runtime_s),
        "resources": {"cpu": template.cpu, "memory": template.memory},
        "seed": (seed * 1_000_003 + zlib.crc32(template.id.encode())) % 2**31,
        **({"secrets": [list(r) for r in template.secrets]} if template.secrets else {}),
    }


def request_hash(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def create_run(
    engine: Engine,
    catalog: Catalog,
    request: PlanRequest,
    body: dict[str, Any],
    *,
    backend: str,
    default_image: str,
    seed: int = 0,
    idempotency_key: str | None = None,
    store: ObjectStore | None = None,
    rerun_of: str | None = None,
) -> tuple[str, bool]:
    """Plan and record a run; returns (run id, created). Same key + same body = same run.
    `rerun_of` links a rerun to its original (controller.results.reruns)."""
    digest = request_hash(body)
    if idempotency_key:
        existing = _by_key(engine, idempotency_key, digest)
        if existing:
            return existing, False
    catalog, sources = planning_catalog(engine, catalog)  # estimates learnt from earlier runs
    the_plan = plan(catalog, request, sources)
    if not the_plan.selected:
        reasons = "; ".join(f"{e.template_id}: {e.reason}" for e in the_plan.excluded[:3])
        raise InputError(
            f"nothing would run: the budget excludes every template ({reasons})",
            hint="raise budget_usd or pick cheaper templates; POST /v1/plans shows the plan",
            field="budget_usd",
        )
    run_id = new_run_id()
    now = datetime.now(UTC)
    rows = sandbox_rows(run_id, the_plan, catalog, default_image, seed)
    _store_items(store, run_id, rows)
    try:
        with engine.begin() as conn:
            conn.execute(
                insert(runs).values(
                    id=run_id,
                    status=RunStatus.PENDING,
                    backend=backend,
                    request=_without_items(body),
                    plan=the_plan.to_dict(),
                    budget_usd=the_plan.budget_usd,
                    max_parallel=the_plan.max_parallel,
                    idempotency_key=idempotency_key,
                    request_hash=digest,
                    cancel_requested=False,
                    created_at=now,
                    stage=0,
                    confirm_over=bool(body.get("confirm_over")),
                    alerts=[],
                    rerun_of=rerun_of,
                    labels=dict(body.get("labels") or {}),
                )
            )
            conn.execute(insert(sandboxes), [r for r, _ in rows])
    except IntegrityError:
        if idempotency_key:  # a concurrent request with the same key won the race
            existing = _by_key(engine, idempotency_key, digest)
            if existing:
                return existing, False
        raise
    return run_id, True


def _by_key(engine: Engine, key: str, digest: str) -> str | None:
    with engine.connect() as conn:
        row = conn.execute(
            select(runs.c.id, runs.c.request_hash).where(runs.c.idempotency_key == key)
        ).first()
    if row is None:
        return None
    if row.request_hash != digest:
        raise ConflictError(
            f"Idempotency-Key {key!r} was already used for a different request (run {row.id})",
            hint="use a new key for a new request",
        )
    return str(row.id)


def _without_items(body: dict[str, Any]) -> dict[str, Any]:
    """The request as kept on the run: ad-hoc items by count and digest, not in full."""
    if not body.get("items"):
        return body
    digest = hashlib.sha256(json.dumps(body["items"], sort_keys=True).encode()).hexdigest()
    return {**body, "items": {"count": len(body["items"]), "sha256": digest}}


def _store_items(store: ObjectStore | None, run_id: str,
                 rows: list[tuple[dict[str, Any], tuple[WorkItem, ...]]]) -> None:
    """Each batch sandbox's items file, written before its row exists."""
    for row, items in rows:
        if not items:
            continue
        if store is None:
            raise InputError("this controller cannot run batch templates (no store)")
        store.put(items_key(run_id, row["id"]), items_jsonl(items))


def sandbox_rows(
    run_id: str, the_plan: Plan, catalog: Catalog, default_image: str, seed: int
) -> list[tuple[dict[str, Any], tuple[WorkItem, ...]]]:
    """The sandbox rows in launch order, with their items: the plan's sandboxes as it
    decided them (batches, items, expensive, stage); `catalog` gives each its spec."""
    rows = []
    for position, planned in enumerate(the_plan.sandboxes()):
        spec = sandbox_spec(catalog.templates[planned.template_id], seed, default_image)
        sandbox_id = sandbox_id_for(run_id, planned.template_id, position, planned.batch)
        if planned.batch is not None:
            spec["items"] = {"key": items_key(run_id, sandbox_id), "count": len(planned.items),
                             "batch": planned.batch}
        rows.append(({
            "id": sandbox_id,
            "run_id": run_id,
            "template_id": planned.template_id,
            "position": position,
            "status": SandboxStatus.PENDING,
            "spec": spec,
            "attempt": 0,
            "last_seq": 0,
            "cost_usd": 0.0,
            "prior_cost_usd": 0.0,
            "tokens": 0,
            "aggregated": False,
            "expensive": planned.expensive,
            "stage": planned.stage,
            "cost_alerted": False,
        }, planned.items))
    return rows


# Sandboxes per page of GET /v1/runs/{id}: what a poll gets by default, and at most.
SANDBOX_PAGE_DEFAULT = 100
SANDBOX_PAGE_MAX = 1000


def get_run(
    engine: Engine, run_id: str, limit: int = SANDBOX_PAGE_MAX, offset: int = 0
) -> dict[str, Any]:
    """One run with a page of its sandboxes (launch order) and counts over all of them."""
    with engine.connect() as conn:
        run = run_with_plan(conn, run_id)
        if run is None:
            raise NotFoundError(f"unknown run {run_id}", hint="list runs with `simplectl status`")
        rows = conn.execute(
            select(*[c for c in sandboxes.c if c.name not in _UNPUBLISHED])
            .where(sandboxes.c.run_id == run_id)
            .order_by(sandboxes.c.position)
            .limit(min(limit, SANDBOX_PAGE_MAX))
            .offset(offset)
        ).all()
        counts = {
            status: int(n)
            for status, n in conn.execute(
                select(sandboxes.c.status, func.count())
                .where(sandboxes.c.run_id == run_id)
                .group_by(sandboxes.c.status)
            )
        }
        grouped = _stages(conn, run)
    return {
        **public_run(vars(run)),
        "sandboxes": [public_sandbox(r._mapping) for r in rows],
        "sandboxes_total": sum(counts.values()),
        "sandbox_counts": counts,
        "stages": grouped,
    }


def _stages(conn: Any, run: Any) -> list[dict[str, Any]]:
    """A staged run's sandboxes by stage (all of them, whatever the page); [] if flat."""
    if not (run.plan or {}).get("stages"):
        return []
    members = conn.execute(
        select(sandboxes.c.id.label("sandbox_id"), sandboxes.c.status, sandboxes.c.stage)
        .where(sandboxes.c.run_id == run.id)
        .order_by(sandboxes.c.position)
    ).all()
    return stage_summary(run.plan, [m._asdict() for m in members])


# Large columns the public view never shows: not read for a run page.
_UNPUBLISHED = frozenset({"spec", "token_hash"})


def get_run_row(engine: Engine, run_id: str) -> Any:
    """The run's row; NotFoundError when there is none."""
    with engine.connect() as conn:
        run = conn.execute(select(runs.c.id).where(runs.c.id == run_id)).first()
    if run is None:
        raise NotFoundError(f"unknown run {run_id}", hint="list runs with `simplectl status`")
    return run


def list_runs(
    engine: Engine,
    limit: int = 50,
    status: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The latest runs, newest first; with `labels`, only those carrying every pair."""
    query = select_runs().order_by(runs.c.created_at.desc()).limit(limit)
    if status:
        query = query.where(runs.c.status == status)
    for key, value in (labels or {}).items():
        query = query.where(runs.c.labels[key].as_string() == value)
    with engine.connect() as conn:
        return [public_run(vars(r)) for r in with_plans(conn, conn.execute(query).all())]


def cancel_run(engine: Engine, run_id: str) -> dict[str, Any]:
    """Ask the reconciler to stop every sandbox of the run."""
    with engine.begin() as conn:
        found = conn.execute(select(runs.c.status).where(runs.c.id == run_id)).first()
        if found is None:
            raise NotFoundError(f"unknown run {run_id}", hint="list runs with `simplectl status`")
        if found.status in ACTIVE_RUN:
            conn.execute(update(runs).where(runs.c.id == run_id).values(cancel_requested=True))
    return get_run(engine, run_id)


def get_sandbox(engine: Engine, sandbox_id: str) -> dict[str, Any]:
    with engine.connect() as conn:
        row = conn.execute(select(sandboxes).where(sandboxes.c.id == sandbox_id)).first()
        if row is None:
            raise NotFoundError(f"unknown sandbox {sandbox_id}", hint="see `simplectl status RUN`")
        history = attempt_rows(conn, sandbox_id)
    return {**public_sandbox(row._asdict()), "attempt_history": history,
            "resume_note": history[-1].get("resume_note") if history else None,
            "log_dropped_bytes": row.log_dropped_bytes}


def public_run(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "run_id": row["id"],
        "status": row["status"],
        "backend": row["backend"],
        "plan": row["plan"],
        "request": row["request"],
        "budget_usd": row["budget_usd"],
        "max_parallel": row["max_parallel"],
        "cancel_requested": row["cancel_requested"],
        "error": row["error"],
        "stage": row.get("stage") or 0,
        "confirm_over": bool(row.get("confirm_over")),
        "hold_reason": row.get("hold_reason"),
        "alerts": row.get("alerts") or [],
        "labels": row.get("labels") or {},
        "created_at": _iso(row["created_at"]),
        "started_at": _iso(row["started_at"]),
        "finished_at": _iso(row["finished_at"]),
        "purged_at": _iso(row.get("purged_at")),
        "rerun_of": row.get("rerun_of"),
    }


def public_sandbox(row: Mapping[Any, Any]) -> dict[str, Any]:
    return {
        "sandbox_id": row["id"],
        "run_id": row["run_id"],
        "template_id": row["template_id"],
        "stage": row.get("stage") or 0,
        "status": row["status"],
        "attempts": row["attempt"],
        "exit_code": row["exit_code"],
        "error": row["error"],
        "step": row["step"],
        "steps_total": row["steps_total"],
        "cost_usd": round(row["cost_usd"] + row["prior_cost_usd"], 6),
        "tokens": row["tokens"],
        "last_seq": row["last_seq"],
        "launched_at": _iso(row["launched_at"]),
        "started_at": _iso(row["started_at"]),
        "finished_at": _iso(row["finished_at"]),
        "aggregated": row["aggregated"],
    }


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None

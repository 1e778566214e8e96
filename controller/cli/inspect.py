"""Commands that look at what exists: status, report, logs, cancel, templates."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from controller.cli.common import (
    SANDBOX_PAGE_MAX,
    Catalogs,
    Server,
    Token,
    api_client,
    err,
    errors_to_exit,
)
from controller.cli.labels import parse_labels


def status(
    run_id: Annotated[str | None, typer.Argument(help="A run id; none lists recent runs.")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    label: Annotated[
        list[str] | None,
        typer.Option(
            "--label", metavar="KEY=VALUE", help="List only runs with this label (repeatable)."
        ),
    ] = None,
    server: Server = None,
    token: Token = None,
) -> None:
    """Show one run with its sandboxes, or list recent runs (--label: those carrying it)."""
    filters = parse_labels(label)
    with errors_to_exit(), api_client(server, token) as client:
        data = (
            client.get(f"/v1/runs/{run_id}", params={"limit": SANDBOX_PAGE_MAX})
            if run_id
            else client.get(
                "/v1/runs", params={"label": [f"{k}={v}" for k, v in filters.items()]}
            )
        )
    if as_json:
        print(json.dumps(data, indent=2))
        return
    out = Console()
    if run_id:
        out.print(f"run {data['run_id']}: {data['status']}", highlight=False)
        if data.get("labels"):
            out.print("  " + " ".join(f"{k}={v}" for k, v in sorted(data["labels"].items())),
                      highlight=False, markup=False)
        for s in data["sandboxes"]:
            out.print(
                f"  {s['sandbox_id']:<50} {s['status']:<10} step {s['step'] or 0}/"
                f"{s['steps_total'] or '?'} ${s['cost_usd']:.2f} {s['error'] or ''}",
                highlight=False,
            )
        more = data["sandboxes_total"] - len(data["sandboxes"])
        if more > 0:
            out.print(f"  ... and {more} more (GET /v1/runs/{run_id}?offset=...)", highlight=False)
    else:
        for r in data["runs"]:
            out.print(
                f"{r['run_id']}  {r['status']:<16} {r['created_at']}  "
                f"{len(r['plan']['selected'])} sandboxes",
                highlight=False,
            )


def report(
    run_id: str,
    fmt: Annotated[str, typer.Option("--format", help="json, junit or markdown")] = "json",
    server: Server = None,
    token: Token = None,
) -> None:
    """Print a run's report."""
    with errors_to_exit(), api_client(server, token) as client:
        print(client.text(f"/v1/runs/{run_id}/report", params={"format": fmt}), end="")


def logs(
    sandbox_id: str,
    follow: Annotated[bool, typer.Option("--follow", "-f")] = False,
    server: Server = None,
    token: Token = None,
) -> None:
    """Print a sandbox's logs (live or archived); --follow streams them."""
    with errors_to_exit(), api_client(server, token) as client:
        for chunk in client.stream_lines(
            f"/v1/sandboxes/{sandbox_id}/logs", {"follow": str(follow).lower()}
        ):
            sys.stdout.buffer.write(chunk)
            sys.stdout.flush()


def cancel(run_id: str, server: Server = None, token: Token = None) -> None:
    """Stop every sandbox of a run."""
    with errors_to_exit(), api_client(server, token) as client:
        data = client.post(f"/v1/runs/{run_id}/cancel")
    err.print(f"run {run_id}: cancel requested ({data['status']})")


def templates(
    suite: Annotated[str | None, typer.Option("--suite")] = None,
    category: Annotated[str | None, typer.Option("--category")] = None,
    tag: Annotated[str | None, typer.Option("--tag")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    show_accuracy: Annotated[
        bool, typer.Option("--accuracy", help="Estimates against what runs really cost.")
    ] = False,
    catalog: Catalogs = None,
    server: Server = None,
    token: Token = None,
) -> None:
    """List the catalog's templates and suites (--accuracy: estimate against actual)."""
    if show_accuracy:
        _accuracy(as_json, catalog, server, token)
        return
    params = {k: v for k, v in {"suite": suite, "category": category, "tag": tag}.items() if v}
    with errors_to_exit(), api_client(server, token, catalog) as client:
        data = client.get("/v1/templates", params=params)
    if as_json:
        print(json.dumps(data, indent=2))
        return
    table = Table(title=f"{data['count']} templates")
    widest = max((len(t["id"]) for t in data["templates"]), default=2)
    table.add_column("id", no_wrap=True, min_width=widest)  # whole ids, even in a CI log
    for column in ("category", "cost $", "runtime s"):
        table.add_column(column)
    table.add_column("mechanisms", overflow="fold")
    for t in data["templates"]:
        cost, runtime = t["estimate"]["cost_usd"], t["estimate"]["runtime_s"]
        table.add_row(
            t["id"],
            t["category"],
            f"{cost[0]:g}-{cost[1]:g}",
            f"{runtime[0]:g}-{runtime[1]:g}",
            " ".join(t["mechanisms"]),
        )
    Console().print(table)
    Console().print("suites: " + ", ".join(f"{k} ({len(v)})" for k, v in data["suites"].items()))


def _accuracy(as_json: bool, catalog: Any, server: str | None, token: str | None) -> None:
    with errors_to_exit(), api_client(server, token, catalog) as client:
        rows = client.get("/v1/estimates")["templates"]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table(title=f"estimate accuracy: {len(rows)} templates observed")
    columns = ("template", "runs", "estimate $", "actual $ mean (min-max)", "in estimate",
               "error", "runtime s est / actual", "next estimate")
    for column in columns:
        table.add_column(column)
    for r in rows:
        est, actual = r["estimate_cost_usd"], r["actual_cost_usd"]
        runtime = r["estimate_runtime_s"]
        table.add_row(
            r["template_id"],
            str(r["runs"]),
            f"{est[0]:.2f}-{est[1]:.2f}" if est else "?",
            f"{actual['mean']:.4f} ({actual['min']:.4f}-{actual['max']:.4f})",
            f"{r['within_estimate_pct']:.0f}%",
            "" if r["error_pct"] is None else f"{r['error_pct']:+.0f}%",
            f"{runtime[0]:g}-{runtime[1]:g} / {r['actual_runtime_s_mean'] or 0:.1f}"
            if runtime else "",
            r["estimate_source"],
        )
    Console(width=200).print(table)

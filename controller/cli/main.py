"""`simplectl`: run, plan, status, report, logs, cancel, templates, serve, db.

Without --server (or SIMPLE_SERVER) commands work on the local embedded
controller (the data directory in SIMPLE_DATA_DIR, default ./.simple); with it,
they are thin clients of the HTTP API. Output for people goes to stderr; what
scripts read (report JSON, ids) goes to stdout.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from enum import IntEnum
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from controller.cli.client import ApiClient, ApiError
from controller.errors import SimpleError
from controller.planner import Priority
from controller.settings import BackendName, Settings

app = typer.Typer(
    help="SIMPLE: run simulation templates in parallel, one sandbox each.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="Database maintenance.", no_args_is_help=True)
app.add_typer(db_app, name="db")
err = Console(stderr=True, markup=False)


class Exit(IntEnum):
    OK = 0
    FAILED = 1
    USAGE = 2
    BUDGET = 3
    CANCELLED = 4


RUN_EXIT = {
    "succeeded": Exit.OK,
    "failed": Exit.FAILED,
    "budget_exceeded": Exit.BUDGET,
    "cancelled": Exit.CANCELLED,
}

Server = Annotated[
    str | None,
    typer.Option(
        "--server", envvar="SIMPLE_SERVER", help="Controller URL; default: local embedded."
    ),
]
Token = Annotated[
    str | None, typer.Option("--token", envvar="SIMPLE_TOKEN", help="API token for --server.")
]
Catalogs = Annotated[
    list[Path] | None, typer.Option("--catalog", help="Extra catalog dir (repeatable).")
]
Verbose = Annotated[bool, typer.Option("--verbose", "-v", help="Log the controller's work.")]


def _settings(catalog: list[Path] | None = None, **overrides: Any) -> Settings:
    settings = Settings()
    update = {k: v for k, v in overrides.items() if v is not None}
    if catalog:
        update["catalog_dirs"] = [*settings.catalog_dirs, *catalog]
    return settings.model_copy(update=update)


def _fail(message: str, code: Exit = Exit.USAGE) -> typer.Exit:
    err.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True, markup=True)
    return typer.Exit(int(code))


@contextmanager
def _errors() -> Iterator[None]:
    """Map errors to one clear line and an exit code."""
    try:
        yield
    except ApiError as e:
        status = e.status or 0
        raise _fail(str(e), Exit.USAGE if 400 <= status < 500 else Exit.FAILED) from None
    except SimpleError as e:
        raise _fail(str(e), Exit.USAGE if e.status_code < 500 else Exit.FAILED) from None


@contextmanager
def _client(
    server: str | None, token: str | None, catalog: list[Path] | None = None
) -> Iterator[ApiClient]:
    """A client of --server, or of the local controller (no reconciler started)."""
    if server:
        if catalog:
            raise _fail(
                "--catalog applies to the embedded controller; with --server, "
                "add catalogs on the server (SIMPLE_CATALOG_DIRS)"
            )
        yield ApiClient.remote(server, token)
        return
    from fastapi.testclient import TestClient

    from controller.api.app import create_app
    from controller.db.engine import upgrade
    from controller.service import Controller

    controller = Controller(_settings(catalog))
    upgrade(controller.engine)
    with TestClient(
        create_app(controller, manage_lifecycle=False), raise_server_exceptions=False
    ) as http:
        yield ApiClient(http)
    controller.close()


def _body(
    names: list[str],
    budget: float | None,
    priority: Priority,
    parallel: int | None,
    query: str | None,
    seed: int,
) -> dict[str, Any]:
    return {
        "names": names,
        "budget_usd": budget,
        "priority": priority.value,
        "max_parallel": parallel,
        "query": query,
        "seed": seed,
    }


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


@app.command()
def run(
    names: Annotated[list[str] | None, typer.Argument(help="Suites and/or template ids.")] = None,
    budget: Annotated[float | None, typer.Option("--budget", help="Budget in USD.")] = None,
    priority: Annotated[Priority, typer.Option("--priority")] = Priority.BALANCED,
    parallel: Annotated[
        int | None, typer.Option("--parallel", min=1, help="Max sandboxes at once.")
    ] = None,
    backend: Annotated[
        str | None, typer.Option("--backend", help="process, docker or kubernetes (embedded only).")
    ] = None,
    catalog: Catalogs = None,
    query: Annotated[str | None, typer.Option("--query", help="Free-text request.")] = None,
    seed: Annotated[int, typer.Option("--seed", min=0)] = 0,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait/--no-wait", help="Follow the run to its end (always, without --server)."
        ),
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print only the report JSON.")] = False,
    junit: Annotated[Path | None, typer.Option("--junit", help="Write a JUnit XML report.")] = None,
    markdown: Annotated[
        Path | None, typer.Option("--markdown", help="Write a Markdown summary.")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print what would be created.")
    ] = False,
    output: Annotated[
        str, typer.Option("-o", "--output", help="Dry-run format: yaml|json.")
    ] = "yaml",
    server: Server = None,
    token: Token = None,
    idempotency_key: Annotated[
        str | None, typer.Option("--idempotency-key", envvar="SIMPLE_IDEMPOTENCY_KEY")
    ] = None,
    verbose: Verbose = False,
) -> None:
    """Plan and run templates, print the report.

    Exit 0 all succeeded, 1 some failed, 2 usage or input error, 3 budget, 4 cancelled.
    """
    _setup_logging(verbose)
    names = names or []
    if backend is not None and backend not in ("process", "docker", "kubernetes"):
        raise _fail(f"unknown backend {backend!r}; use process, docker or kubernetes")
    if server and backend:
        raise _fail("--backend applies to the embedded controller; the server has its own")
    body = _body(names, budget, priority, parallel, query, seed)
    with _errors():
        if dry_run:
            _dry_run(body, catalog, backend, output)
            return
        if server:
            with _client(server, token, catalog) as client:
                run_id = _start(client, body, idempotency_key)
                if not wait:
                    print(run_id)
                    return
                final = _wait(client, run_id, as_json)
                code = _finish(client, final, as_json, junit, markdown)
        else:
            code = _run_embedded(body, catalog, backend, as_json, junit, markdown, idempotency_key)
    raise typer.Exit(int(code))


def _dry_run(
    body: dict[str, Any], catalog: list[Path] | None, backend: str | None, output: str
) -> None:
    from controller.api.models import RunCreate
    from controller.catalog import load_catalog
    from controller.cli.dry_run import render_run
    from controller.service import catalog_dirs

    settings = _settings(catalog, backend=backend)
    request = RunCreate.model_validate(body).plan_request()
    rendered = render_run(load_catalog(catalog_dirs(settings)), request, settings, body["seed"])
    if output == "json":
        print(json.dumps(rendered, indent=2))
    elif output == "yaml":
        print(yaml.safe_dump(rendered, sort_keys=False), end="")
    else:
        raise _fail(f"unknown output format {output!r}; use yaml or json")


def _run_embedded(
    body: dict[str, Any],
    catalog: list[Path] | None,
    backend: str | None,
    as_json: bool,
    junit: Path | None,
    markdown: Path | None,
    key: str | None,
) -> Exit:
    from controller.cli.embedded import EmbeddedServer

    settings = _settings(catalog, backend=backend)
    with EmbeddedServer(settings) as embedded, _client(embedded.url, None) as client:
        run_id = _start(client, body, key)
        try:
            final = _wait(client, run_id, as_json)
        except KeyboardInterrupt:
            err.print(f"cancelling run {run_id} …")
            client.post(f"/v1/runs/{run_id}/cancel")
            final = _wait(client, run_id, True)
        return _finish(client, final, as_json, junit, markdown)


def _start(client: ApiClient, body: dict[str, Any], key: str | None) -> str:
    headers = {"Idempotency-Key": key} if key else {}
    run = client.post("/v1/runs", json=body, headers=headers)
    plan = run["plan"]
    err.print(
        f"run {run['run_id']}: {len(plan['selected'])} sandboxes, "
        f"{plan['max_parallel']} at once, estimated "
        f"${plan['estimated_cost_usd'][0]:.2f}-${plan['estimated_cost_usd'][1]:.2f}"
        + (f", {len(plan['excluded'])} excluded" if plan["excluded"] else ""),
        highlight=False,
    )
    for excluded in plan["excluded"]:
        err.print(f"  excluded {excluded['template_id']}: {excluded['reason']}", highlight=False)
    return str(run["run_id"])


def _wait(client: ApiClient, run_id: str, quiet: bool) -> dict[str, Any]:
    from controller.cli.progress import follow_run

    states = (
        data for kind, data in client.stream_events(f"/v1/runs/{run_id}/stream") if kind == "run"
    )
    if quiet:
        import io

        return follow_run(states, io.StringIO())
    return follow_run(states)


def _finish(
    client: ApiClient,
    final: dict[str, Any],
    as_json: bool,
    junit: Path | None,
    markdown: Path | None,
) -> Exit:
    run_id = final["run_id"]
    report = client.get(f"/v1/runs/{run_id}/report")
    if junit:
        junit.write_text(client.text(f"/v1/runs/{run_id}/report", params={"format": "junit"}))
    if markdown:
        markdown.write_text(client.text(f"/v1/runs/{run_id}/report", params={"format": "markdown"}))
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        _print_report(report)
    return RUN_EXIT.get(report["status"], Exit.FAILED)


def _print_report(report: dict[str, Any]) -> None:
    out = Console()
    table = Table(title=f"run {report['run_id']}: {report['status']}")
    for column in ("template", "status", "attempts", "exit", "duration s", "cost $", "error"):
        table.add_column(column)
    for s in report["sandboxes"]:
        table.add_row(
            s["template_id"],
            s["status"],
            str(s["attempts"]),
            "" if s["exit_code"] is None else str(s["exit_code"]),
            "" if s["duration_s"] is None else f"{s['duration_s']:.1f}",
            "" if s["cost_usd"] is None else f"{s['cost_usd']:.2f}",
            s["error"] or "",
        )
    out.print(table)
    t = report["totals"]
    out.print(
        f"{t['succeeded']}/{t['sandboxes']} succeeded, {t['failed']} failed; "
        f"cost ${t['cost_usd']:.2f}, {t['tokens_used']} tokens, {t['llm_calls']} LLM "
        f"calls, {t['entities_created']} entities, {t['timepoints_created']} timepoints, "
        f"mechanisms {', '.join(t['mechanisms_covered'])} "
        f"({t['mechanism_coverage_pct']}%)",
        highlight=False,
    )


@app.command()
def plan(
    names: Annotated[list[str] | None, typer.Argument(help="Suites and/or template ids.")] = None,
    budget: Annotated[float | None, typer.Option("--budget")] = None,
    priority: Annotated[Priority, typer.Option("--priority")] = Priority.BALANCED,
    parallel: Annotated[int | None, typer.Option("--parallel", min=1)] = None,
    query: Annotated[str | None, typer.Option("--query")] = None,
    catalog: Catalogs = None,
    server: Server = None,
    token: Token = None,
) -> None:
    """Plan without running: selected, excluded, cost and time estimates (JSON)."""
    with _errors(), _client(server, token, catalog) as client:
        print(
            json.dumps(
                client.post(
                    "/v1/plans", json=_body(names or [], budget, priority, parallel, query, 0)
                ),
                indent=2,
            )
        )


@app.command()
def status(
    run_id: Annotated[str | None, typer.Argument(help="A run id; none lists recent runs.")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    server: Server = None,
    token: Token = None,
) -> None:
    """Show one run with its sandboxes, or list recent runs."""
    with _errors(), _client(server, token) as client:
        data = client.get(f"/v1/runs/{run_id}") if run_id else client.get("/v1/runs")
    if as_json:
        print(json.dumps(data, indent=2))
        return
    out = Console()
    if run_id:
        out.print(f"run {data['run_id']}: {data['status']}", highlight=False)
        for s in data["sandboxes"]:
            out.print(
                f"  {s['sandbox_id']:<50} {s['status']:<10} step {s['step'] or 0}/"
                f"{s['steps_total'] or '?'} ${s['cost_usd']:.2f} {s['error'] or ''}",
                highlight=False,
            )
    else:
        for r in data["runs"]:
            out.print(
                f"{r['run_id']}  {r['status']:<16} {r['created_at']}  "
                f"{len(r['plan']['selected'])} sandboxes",
                highlight=False,
            )


@app.command()
def report(
    run_id: str,
    fmt: Annotated[str, typer.Option("--format", help="json, junit or markdown")] = "json",
    server: Server = None,
    token: Token = None,
) -> None:
    """Print a run's report."""
    with _errors(), _client(server, token) as client:
        print(client.text(f"/v1/runs/{run_id}/report", params={"format": fmt}), end="")


@app.command()
def logs(
    sandbox_id: str,
    follow: Annotated[bool, typer.Option("--follow", "-f")] = False,
    server: Server = None,
    token: Token = None,
) -> None:
    """Print a sandbox's logs (live or archived); --follow streams them."""
    with _errors(), _client(server, token) as client:
        for chunk in client.stream_lines(
            f"/v1/sandboxes/{sandbox_id}/logs", {"follow": str(follow).lower()}
        ):
            sys.stdout.buffer.write(chunk)
            sys.stdout.flush()


@app.command()
def cancel(run_id: str, server: Server = None, token: Token = None) -> None:
    """Stop every sandbox of a run."""
    with _errors(), _client(server, token) as client:
        data = client.post(f"/v1/runs/{run_id}/cancel")
    err.print(f"run {run_id}: cancel requested ({data['status']})")


@app.command()
def templates(
    suite: Annotated[str | None, typer.Option("--suite")] = None,
    category: Annotated[str | None, typer.Option("--category")] = None,
    tag: Annotated[str | None, typer.Option("--tag")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    catalog: Catalogs = None,
    server: Server = None,
    token: Token = None,
) -> None:
    """List the catalog's templates and suites."""
    params = {k: v for k, v in {"suite": suite, "category": category, "tag": tag}.items() if v}
    with _errors(), _client(server, token, catalog) as client:
        data = client.get("/v1/templates", params=params)
    if as_json:
        print(json.dumps(data, indent=2))
        return
    table = Table(title=f"{data['count']} templates")
    for column in ("id", "category", "cost $", "runtime s", "mechanisms"):
        table.add_column(column)
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


@app.command()
def serve(
    host: Annotated[str | None, typer.Option("--host", help="Default SIMPLE_HOST.")] = None,
    port: Annotated[int | None, typer.Option("--port", help="Default SIMPLE_PORT.")] = None,
    backend: Annotated[str | None, typer.Option("--backend")] = None,
    catalog: Catalogs = None,
    verbose: Verbose = True,
) -> None:
    """Serve the controller API (migrations are applied at start)."""
    import uvicorn

    from controller.api.app import create_app
    from controller.service import Controller

    _setup_logging(verbose)
    settings = _settings(catalog, host=host, port=port, backend=backend)
    if (
        settings.host not in ("127.0.0.1", "localhost", "::1")
        and not settings.api_tokens
        and not settings.allow_unauthenticated
    ):
        raise _fail(
            f"refusing to serve on {settings.host} without API tokens", Exit.USAGE
        ) from None
    with _errors():
        controller = Controller(settings)
    uvicorn.run(
        create_app(controller),
        host=settings.host,
        port=settings.port,
        log_level="info" if verbose else "warning",
    )


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Apply every pending database migration."""
    from controller.db.engine import create_db_engine, upgrade

    _setup_logging(True)
    with _errors():
        upgrade(create_db_engine(Settings().resolved_database_url))
    err.print("database is at the latest migration")


BackendChoice = BackendName

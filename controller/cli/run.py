"""`simplectl run` and `simplectl plan`: plan, start, follow, report."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from controller.cli.client import ApiClient
from controller.cli.common import (
    DEFAULT_WAIT_TIMEOUT_S,
    RUN_EXIT,
    Catalogs,
    Exit,
    Priority,
    Server,
    Token,
    Verbose,
    WaitTimeout,
    api_client,
    cli_settings,
    err,
    errors_to_exit,
    fail,
    run_body,
    setup_logging,
)
from controller.cli.labels import Labels, run_labels
from controller.cli.servers import embedded_allowed, server_extra_installed

ItemsFile = Annotated[
    Path | None,
    typer.Option("--items", help='JSON Lines of {"item_id", "data"} for the one template named.'),
]
BatchSize = Annotated[
    int | None, typer.Option("--batch-size", min=1, help="Items per sandbox at most (100).")
]


def items_body(items: Path | None, batch_size: int | None) -> dict[str, Any]:
    """The request's `items` and `batch_size`, read and checked here (exit 2 if bad)."""
    body: dict[str, Any] = {}
    if items is not None:
        from controller.catalog.batches import read_items_file

        body["items"] = [{"item_id": i.item_id, "data": i.data} for i in read_items_file(items)]
    if batch_size is not None:
        body["batch_size"] = batch_size
    return body


# Not sent when not given: a priority read from `--query` applies then.
PriorityOption = Annotated[
    Priority | None,
    typer.Option("--priority", help="speed, cost or balanced (default: the query's, or balanced)."),
]

if TYPE_CHECKING:
    from controller.cli.embedded import EmbeddedServer


def run(
    names: Annotated[list[str] | None, typer.Argument(help="Suites and/or template ids.")] = None,
    budget: Annotated[float | None, typer.Option("--budget", help="Budget in USD.")] = None,
    priority: PriorityOption = None,
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
    items: ItemsFile = None,
    batch_size: BatchSize = None,
    server: Server = None,
    token: Token = None,
    idempotency_key: Annotated[
        str | None, typer.Option("--idempotency-key", envvar="SIMPLE_IDEMPOTENCY_KEY")
    ] = None,
    confirm_over: Annotated[
        bool,
        typer.Option(
            "--confirm-over",
            help="On a cost alert (SIMPLE_COST_ALERT_RATIO x estimate) stop launching "
            "until `simplectl confirm RUN`.",
        ),
    ] = False,
    wait_timeout: WaitTimeout = DEFAULT_WAIT_TIMEOUT_S,
    detach: Annotated[
        bool, typer.Option("--detach", help="With --server: start, print the run id, return.")
    ] = False,
    cancel_on_interrupt: Annotated[
        bool,
        typer.Option(
            "--cancel-on-interrupt/--no-cancel-on-interrupt",
            help="With --server: SIGINT/SIGTERM while waiting cancels the run (exit 4); "
            "with --no-cancel-on-interrupt the run goes on (exit 128+signal).",
        ),
    ] = True,
    label: Labels = None,
    ci_labels: Annotated[
        bool,
        typer.Option(
            "--ci-labels/--no-ci-labels",
            help="Label the run with the commit, ref and pipeline URL of GitHub Actions "
            "or GitLab CI, from their variables.",
        ),
    ] = True,
    verbose: Verbose = False,
) -> None:
    """Plan and run templates, print the report.

    Exit 0 all succeeded, 1 some failed, 2 usage or input error, 3 budget, 4 cancelled
    (also by SIGINT/SIGTERM), 5 controller unreachable past --wait-timeout.
    """
    setup_logging(verbose)
    names = names or []
    if backend is not None and backend not in ("process", "docker", "kubernetes"):
        raise fail(f"unknown backend {backend!r}; use process, docker or kubernetes")
    if server and backend:
        raise fail("--backend applies to the embedded controller; the server has its own")
    if detach and not server and not dry_run:
        raise fail("--detach needs --server: the embedded controller ends with this command")
    body = run_body(names, budget, priority, parallel, query, seed, confirm_over)
    labels = run_labels(label, ci_labels, os.environ)
    if labels:
        body["labels"] = labels
    with errors_to_exit():
        body.update(items_body(items, batch_size))
        if dry_run:
            _dry_run(body, catalog, backend, output)
            return
        if server:
            with api_client(server, token, catalog) as client:
                _patient(client, wait_timeout)
                run_id = _start(client, body, idempotency_key)
                if detach or not wait:
                    print(run_id)
                    return
                from controller.cli.progress import wait_for_served_run

                final = wait_for_served_run(client, run_id, cancel_on_interrupt, as_json)
                code = _finish(client, final, as_json, junit, markdown)
        else:
            code = _run_embedded(body, catalog, backend, as_json, junit, markdown, idempotency_key)
    raise typer.Exit(int(code))


def _patient(client: ApiClient, wait_timeout: float) -> None:
    """Survive the controller going away for up to `wait_timeout`, saying so on stderr."""
    client.patience_s = wait_timeout
    client.on_wait = lambda message: err.print(message, highlight=False, soft_wrap=True)


def _dry_run(
    body: dict[str, Any], catalog: list[Path] | None, backend: str | None, output: str
) -> None:
    server_extra_installed("simplectl run --dry-run")  # it renders with the server's modules
    import yaml

    from controller.api.requests import RunCreate
    from controller.catalog.templates import load_catalog
    from controller.cli.dry_run import render_run
    from controller.service import catalog_dirs

    settings = cli_settings(catalog, backend=backend)
    request = RunCreate.model_validate(body).plan_request()
    rendered = render_run(load_catalog(catalog_dirs(settings)), request, settings, body["seed"])
    if output == "json":
        print(json.dumps(rendered, indent=2))
    elif output == "yaml":
        print(yaml.safe_dump(rendered, sort_keys=False), end="")
    else:
        raise fail(f"unknown output format {output!r}; use yaml or json")


def _run_embedded(
    body: dict[str, Any],
    catalog: list[Path] | None,
    backend: str | None,
    as_json: bool,
    junit: Path | None,
    markdown: Path | None,
    key: str | None,
) -> Exit:
    embedded_allowed("simplectl run")
    from controller.cli.embedded import EmbeddedServer
    from controller.cli.progress import wait_for_run_or_cancel

    settings = cli_settings(catalog, backend=backend)
    with (
        EmbeddedServer(settings, session_token=True) as embedded,
        api_client(embedded.url, embedded.token) as client,
    ):
        _check_images(embedded, body)
        run_id = _start(client, body, key)
        final = wait_for_run_or_cancel(client, run_id)
        return _finish(client, final, as_json, junit, markdown)


def _check_images(embedded: EmbeddedServer, body: dict[str, Any]) -> None:
    """Docker sandboxes never pull: refuse to start when an image the run needs is missing."""
    if embedded.settings.backend != "docker":
        return
    from controller.api.requests import RunCreate
    from controller.backends.docker.network import connect, require_images
    from controller.planning.plan import plan

    catalog = embedded.controller.catalog
    the_plan = plan(catalog, RunCreate.model_validate(body).plan_request())
    default = embedded.settings.default_image
    require_images(
        connect(), (catalog.templates[t].image or default for t in the_plan.selected)
    )


def _start(client: ApiClient, body: dict[str, Any], key: str | None) -> str:
    # Retried POSTs must not start a second run: always send a key.
    headers = {"Idempotency-Key": key or f"simplectl-{uuid.uuid4().hex}"}
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
    # Whole template ids and statuses even in an 80-column CI log: the columns that are
    # empty for every sandbox (items, error) are left out, and an error folds.
    rows = []
    for s in report["sandboxes"]:
        counts = s.get("items") or {}
        rows.append((
            s["template_id"],
            s["status"],
            str(s["attempts"]),
            "" if s["exit_code"] is None else str(s["exit_code"]),
            "" if s["duration_s"] is None else f"{s['duration_s']:.1f}",
            "" if s["cost_usd"] is None else f"{s['cost_usd']:.2f}",
            f"{counts['passed']}/{counts['total']} passed, {counts['failed']} failed, "
            f"{counts['errored']} errored" if counts.get("total") else "",
            s["error"] or "",
        ))
    columns = [("template", max((len(r[0]) for r in rows), default=8)), ("status", 9),
               ("tries", 5), ("exit", 4), ("secs", 5), ("cost $", 6), ("items", 0),
               ("error", 0)]
    shown = [i for i, (name, _) in enumerate(columns)
             if name not in ("items", "error") or any(r[i] for r in rows)]
    for i in shown:
        name, width = columns[i]
        if width:
            table.add_column(name, no_wrap=True, min_width=width)
        else:
            table.add_column(name, overflow="fold")
    for row in rows:
        table.add_row(*(row[i] for i in shown))
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


def plan(
    names: Annotated[list[str] | None, typer.Argument(help="Suites and/or template ids.")] = None,
    budget: Annotated[float | None, typer.Option("--budget")] = None,
    priority: PriorityOption = None,
    parallel: Annotated[int | None, typer.Option("--parallel", min=1)] = None,
    query: Annotated[str | None, typer.Option("--query")] = None,
    items: ItemsFile = None,
    batch_size: BatchSize = None,
    catalog: Catalogs = None,
    server: Server = None,
    token: Token = None,
) -> None:
    """Plan without running: selected, excluded, cost and time estimates (JSON)."""
    with errors_to_exit(), api_client(server, token, catalog) as client:
        body = run_body(names or [], budget, priority, parallel, query, 0)
        body.update(items_body(items, batch_size))
        print(json.dumps(client.post("/v1/plans", json=body), indent=2))



def finish_run(client: ApiClient, final: dict[str, Any], as_json: bool = False,
               junit: Path | None = None, markdown: Path | None = None) -> Exit:
    """Print an ended run's report (and write its files); the exit code for its status.
    For commands that follow a run they did not start with `run` (`rerun`)."""
    return _finish(client, final, as_json, junit, markdown)

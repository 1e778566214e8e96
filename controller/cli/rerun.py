"""`simplectl rerun RUN`: a new run of what failed in RUN (or of all of it)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Annotated, Any

import typer

from controller.cli.client import ApiClient
from controller.cli.common import (
    Catalogs,
    Server,
    Token,
    Verbose,
    api_client,
    cli_settings,
    err,
    errors_to_exit,
    setup_logging,
)


def rerun(
    run_id: str,
    failed: Annotated[
        bool,
        typer.Option(
            "--failed/--all",
            help="--failed (default): the sandboxes that failed, timed out, were lost or ran "
            "out of memory, and the items without a passing result; --all: every sandbox.",
        ),
    ] = True,
    budget: Annotated[
        float | None, typer.Option("--budget", help="Budget in USD; default the original's.")
    ] = None,
    parallel: Annotated[
        int | None, typer.Option("--parallel", min=1, help="Max sandboxes at once.")
    ] = None,
    wait: Annotated[
        bool,
        typer.Option("--wait/--no-wait",
                     help="Follow the new run to its end (always, without --server)."),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print only the report JSON.")] = False,
    junit: Annotated[Path | None, typer.Option("--junit", help="Write a JUnit XML report.")] = None,
    markdown: Annotated[
        Path | None, typer.Option("--markdown", help="Write a Markdown summary.")
    ] = None,
    catalog: Catalogs = None,
    server: Server = None,
    token: Token = None,
    verbose: Verbose = False,
) -> None:
    """Start a new run of what failed in RUN (linked to it: `rerun_of`); print its id.

    With --wait (always without --server) it follows the new run and exits as `run`
    does: 0 all succeeded, 1 some failed, 2 usage or input error, 3 budget, 4 cancelled.
    """
    from controller.cli.progress import wait_for_run, wait_for_run_or_cancel
    from controller.cli.run import finish_run

    setup_logging(verbose)
    body: dict[str, Any] = {"scope": "failed" if failed else "all", "budget_usd": budget,
                            "max_parallel": parallel}
    with errors_to_exit():
        if server:
            with api_client(server, token, catalog) as client:
                new_id = _start(client, run_id, body)
                if not wait:
                    print(new_id)
                    return
                code = finish_run(client, wait_for_run(client, new_id), as_json, junit,
                                  markdown)
        else:
            from controller.cli.embedded import EmbeddedServer

            with (
                EmbeddedServer(cli_settings(catalog), session_token=True) as embedded,
                api_client(embedded.url, embedded.token) as client,
            ):
                new_id = _start(client, run_id, body)
                final = wait_for_run_or_cancel(client, new_id)
                code = finish_run(client, final, as_json, junit, markdown)
    raise typer.Exit(int(code))


def _start(client: ApiClient, run_id: str, body: dict[str, Any]) -> str:
    # Retried POSTs must not start a second rerun: always send a key.
    headers = {"Idempotency-Key": f"simplectl-rerun-{uuid.uuid4().hex}"}
    run = client.post(f"/v1/runs/{run_id}/rerun", json=body, headers=headers)
    taken = run["request"].get("rerun", {})
    err.print(
        f"run {run['run_id']}: rerun of {run_id} ({body['scope']}): "
        f"{len(taken.get('sandboxes', []))} of its sandboxes"
        + (f", {taken['items']} items" if taken.get("items") else ""),
        highlight=False,
        soft_wrap=True,
    )
    for excluded in run["plan"]["excluded"]:
        err.print(f"  excluded {excluded['template_id']}: {excluded['reason']}", highlight=False)
    return str(run["run_id"])

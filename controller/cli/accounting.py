"""`simplectl verify` and `simplectl confirm`: a run's ledger, and cost-alert holds."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from controller.cli.common import Exit, Server, Token, api_client, err, errors_to_exit


def verify(
    run_id: str,
    as_json: Annotated[bool, typer.Option("--json", help="Print the verdict as JSON.")] = False,
    server: Server = None,
    token: Token = None,
) -> None:
    """Recompute a run's ledger from the database and re-hash its snapshots.

    Exit 0 with a one-line summary when everything matches; 1 naming the first
    entry that does not, and why.
    """
    with errors_to_exit(), api_client(server, token) as client:
        verdict = client.get(f"/v1/runs/{run_id}/verify")
    if as_json:
        print(json.dumps(verdict, indent=2))
    else:
        print(verdict["summary"])
    raise typer.Exit(int(Exit.OK if verdict["ok"] else Exit.FAILED))


def confirm(run_id: str, server: Server = None, token: Token = None) -> None:
    """Let a run held by a cost alert (run --confirm-over) launch again."""
    with errors_to_exit(), api_client(server, token) as client:
        result = client.post(f"/v1/runs/{run_id}/confirm")
    err.print(f"run {run_id}: confirmed ({result['confirmed']})", highlight=False)

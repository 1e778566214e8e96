"""`simplectl gc`: retention, by hand (the controller also runs it daily)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from controller.cli.common import Server, Token, api_client, err, errors_to_exit


def gc(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would be freed; remove nothing.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the answer as JSON.")] = False,
    server: Server = None,
    token: Token = None,
) -> None:
    """Free the logs, item files, resume copies, stage inputs and event rows of runs that
    ended more than SIMPLE_RETENTION_DAYS (30) ago; reports, results and snapshots stay.

    With --server it asks that controller (POST /v1/gc, an admin's call); without, it
    works on the local embedded controller's database and store.
    """
    with errors_to_exit(), api_client(server, token) as client:
        result = client.post("/v1/gc", params={"dry_run": str(dry_run).lower()})
    if as_json:
        print(json.dumps(result, indent=2))
        return
    print(result["summary"])
    for kind, freed in result["by_kind"].items():
        if freed["objects"]:
            err.print(f"  {kind}: {freed['objects']} objects, {freed['bytes']} bytes",
                      highlight=False)
    if result["run_ids"]:
        shown = ", ".join(result["run_ids"][:10])
        more = result["runs"] - min(10, len(result["run_ids"]))
        err.print(f"  runs: {shown}" + (f" and {more} more" if more > 0 else ""),
                  highlight=False)

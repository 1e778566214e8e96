"""`simplectl ask` (one turn) and `simplectl chat` (interactive): the principal in a terminal.

With --server they are clients of `POST /v1/chat` (same tokens as the API).
Without it they start the embedded controller, so a run they start really runs;
`ask` then follows it to its end, and `chat` waits for its runs before exiting.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer

from controller.cli.client import ApiClient
from controller.cli.common import (
    Catalogs,
    Exit,
    Server,
    Token,
    api_client,
    cli_settings,
    err,
    errors_to_exit,
)
from controller.cli.servers import embedded_allowed

Yes = Annotated[bool, typer.Option("--yes", "-y", help="Confirm what the request needs.")]
Conversation = Annotated[
    str | None, typer.Option("--conversation", help="Continue this conversation id.")
]
FAILED_KINDS = {"error", "refused"}


def ask(
    words: Annotated[list[str], typer.Argument(help='What to ask, e.g. "how\'s quick doing?"')],
    yes: Yes = False,
    conversation: Conversation = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the whole reply as JSON.")] = False,
    server: Server = None,
    token: Token = None,
    catalog: Catalogs = None,
) -> None:
    """Ask the principal once: plan, run, or a question about runs."""
    message = " ".join(words).strip()
    with errors_to_exit(), _session(server, token, catalog) as (client, embedded):
        reply = client.post("/v1/chat", json={
            "message": message, "confirm": yes, "conversation_id": conversation})
        _show(reply, as_json)
        if embedded and reply.get("kind") == "started":
            _follow(client, reply["run"]["run_id"])
    if reply.get("kind") in FAILED_KINDS:
        raise typer.Exit(int(Exit.FAILED))
    if reply.get("needs_confirmation"):
        # An embedded controller's conversations end with the command: only --yes helps.
        later = "" if embedded else (
            f"answer `simplectl ask --conversation {reply['conversation_id']} yes`, or ")
        err.print(f"(nothing was done: {later}ask again with --yes)")
    if reply.get("kind") == "confirm":
        # a run was asked for and is held for a yes: a script must not read that as done
        raise typer.Exit(int(Exit.NEEDS_YES))


def chat(server: Server = None, token: Token = None, catalog: Catalogs = None) -> None:
    """Talk with the principal; an empty line or Ctrl-D ends the conversation."""
    conversation: str | None = None
    started: list[str] = []
    with errors_to_exit(), _session(server, token, catalog) as (client, embedded):
        err.print("Ask me to plan or run templates, or about runs. Empty line to quit.")
        for line in _lines():
            reply = client.post("/v1/chat", json={"message": line,
                                                  "conversation_id": conversation})
            conversation = reply["conversation_id"]
            _show(reply, as_json=False)
            if reply.get("kind") == "started":
                started.append(reply["run"]["run_id"])
        if embedded:
            for run_id in started:
                _follow(client, run_id)


def _lines() -> Iterator[str]:
    while True:
        err.print("you> ", end="")
        line = sys.stdin.readline()
        if not line.strip():
            return
        yield line.strip()[:2000]


@contextmanager
def _session(
    server: str | None, token: str | None, catalog: list[Any] | None
) -> Iterator[tuple[ApiClient, bool]]:
    if server:
        with api_client(server, token, catalog) as client:
            yield client, False
        return
    embedded_allowed("simplectl ask/chat")
    from controller.cli.embedded import EmbeddedServer

    with EmbeddedServer(cli_settings(catalog)) as embedded, api_client(
        embedded.url, None
    ) as client:
        yield client, True


def _show(reply: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(reply, indent=2))
        return
    print(reply["text"])


def _follow(client: ApiClient, run_id: str) -> None:
    from controller.cli.progress import wait_for_run_or_cancel

    final = wait_for_run_or_cancel(client, run_id)
    err.print(f"run {run_id}: {final['status']}")

"""`simplectl`: run, plan, status, report, logs, cancel, templates, ask, chat, serve, db,
verify, confirm, gc, rerun.

Without --server (or SIMPLE_SERVER) commands work on the local embedded
controller (the data directory in SIMPLE_DATA_DIR, default ./.simple); with it,
they are thin clients of the HTTP API. Output for people goes to stderr; what
scripts read (report JSON, ids) goes to stdout.
"""

from __future__ import annotations

import os
from typing import Annotated

import typer

from controller.cli import accounting, ask, inspect, maintenance, rerun, run
from controller.cli.common import (
    Catalogs,
    Exit,
    Server,
    Token,
    TokenFile,
    Verbose,
    cli_settings,
    err,
    errors_to_exit,
    fail,
    read_token_file,
    setup_logging,
)
from controller.cli.db import db_app
from controller.cli.servers import (
    REQUIRE_ENV,
    require_server,
    server_extra_installed,
    version_callback,
)

MIN_TOKEN_CHARS = 32  # an API token shorter than this is refused at `serve`

app = typer.Typer(
    help="SIMPLE: run simulation templates in parallel, one sandbox each.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _global_options(
    server: Server = None,
    token: Token = None,
    token_file: TokenFile = None,
    required: Annotated[
        bool,
        typer.Option(
            "--require-server",
            envvar=REQUIRE_ENV,
            help="Never start an embedded controller: without --server/SIMPLE_SERVER, "
            "exit 2 (for pipelines).",
        ),
    ] = False,
    _version: Annotated[
        bool,
        typer.Option(
            "--version", callback=version_callback, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    # `simplectl --server URL --token-file F run …` as well as `simplectl run --server URL …`:
    # the global options reach every command through the variables its options read.
    if server:
        os.environ["SIMPLE_SERVER"] = server
    if token_file and not token:
        token = read_token_file(token_file)
    if token:
        os.environ["SIMPLE_TOKEN"] = token
    require_server(required)


app.add_typer(db_app, name="db")
for command in (
    run.run,
    run.plan,
    inspect.status,
    inspect.report,
    inspect.logs,
    inspect.cancel,
    inspect.templates,
    accounting.verify,
    accounting.confirm,
    ask.ask,
    ask.chat,
    maintenance.gc,
    rerun.rerun,
):
    app.command()(command)


@app.command()
def serve(
    host: Annotated[str | None, typer.Option("--host", help="Default SIMPLE_HOST.")] = None,
    port: Annotated[int | None, typer.Option("--port", help="Default SIMPLE_PORT.")] = None,
    backend: Annotated[str | None, typer.Option("--backend")] = None,
    role: Annotated[
        str | None,
        typer.Option(
            "--role",
            help="all (default: API and reconciler), api (HTTP only, any number of replicas) "
            "or reconciler (one leads under a lease). Split roles need PostgreSQL. "
            "Default SIMPLE_ROLE.",
        ),
    ] = None,
    catalog: Catalogs = None,
    verbose: Verbose = True,
) -> None:
    """Serve the controller API (migrations are applied at start)."""
    server_extra_installed("simplectl serve")
    from controller.api.app import create_app
    from controller.cli.embedded import (
        bound_socket,
        docker_listener,
        listener_settings,
        serve_app,
    )
    from controller.leader.choose import needs_postgres
    from controller.service import Controller

    setup_logging(verbose)
    if role is not None and role not in ("all", "api", "reconciler"):
        raise fail(f"--role {role!r}: use all, api or reconciler", Exit.USAGE)
    settings = cli_settings(catalog, host=host, port=port, backend=backend, role=role)
    if needs_postgres(settings):
        raise fail(f"--role {settings.role} needs PostgreSQL (SIMPLE_DATABASE_URL): several "
                   "processes share the database, which SQLite cannot; use --role all",
                   Exit.USAGE)
    if (
        settings.host not in ("127.0.0.1", "localhost", "::1")
        and not settings.api_tokens
        and not settings.allow_unauthenticated
    ):
        raise fail(f"refusing to serve on {settings.host} without API tokens", Exit.USAGE) from None
    short = [i for i, token in enumerate(settings.api_tokens, 1) if len(token) < MIN_TOKEN_CHARS]
    if short:
        raise fail(
            f"refusing to serve: SIMPLE_API_TOKENS has {len(short)} token(s) shorter than "
            f"{MIN_TOKEN_CHARS} characters (number {', '.join(map(str, short))} in the list); "
            "make each one long and random, e.g. `python3 -c 'import secrets; "
            "print(secrets.token_urlsafe(32))'`",
            Exit.USAGE,
        ) from None
    if settings.host in ("0.0.0.0", "::") and not settings.allowed_hosts:
        err.print(
            f"note: listening on {settings.host}, but answering only the loopback names and "
            f"{settings.resolved_controller_url}'s host (400 for others, against DNS "
            "rebinding); add the names clients use to SIMPLE_ALLOWED_HOSTS",
            highlight=False,
        )
    if not settings.api_tokens:
        err.print(
            "warning: no SIMPLE_API_TOKENS: any process on this machine can use the API, "
            "process-backend sandboxes included; set SIMPLE_API_TOKENS to require a token",
            highlight=False,
        )
    with errors_to_exit():
        # bound before anything starts: a taken port is one line, no sandbox adopted or launched
        sock = bound_socket(settings.host, settings.port)
        settings = settings.model_copy(update={"port": sock.getsockname()[1]})  # --port 0
        # docker backend, no network chosen: also listen on the `simple` network's gateway
        listener = docker_listener(
            settings, settings.port, bind=settings.host not in ("0.0.0.0", "::")
        )
        settings = settings.model_copy(update=listener_settings(settings, listener))
        controller = Controller(settings)
        log_level = "info" if verbose else "warning"
        serve_app(create_app(controller), settings, sock, listener, log_level)

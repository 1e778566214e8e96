"""`simplectl db`: the database's schema against this code — upgrade, current, check,
downgrade — each error one line, never a traceback; `--wait` for a database still starting
(an init container, a compose service)."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from controller.cli.common import Exit, err, errors_to_exit, fail, setup_logging
from controller.cli.servers import server_extra_installed
from controller.errors import UnavailableError

db_app = typer.Typer(help="Database maintenance: the schema against this code.",
                     no_args_is_help=True)

Wait = Annotated[
    float,
    typer.Option("--wait", metavar="SECONDS",
                 help="Wait up to SECONDS for the database to answer (0: do not wait)."),
]
POLL_S = 1.0


def _engine(what: str) -> Any:
    """An engine on SIMPLE_DATABASE_URL; exit 2 naming the extra without the server's."""
    server_extra_installed(f"simplectl db {what}")
    import logging

    from controller.db.engine import create_db_engine
    from controller.settings import load_settings

    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)  # a line per plugin

    return create_db_engine(load_settings().resolved_database_url)


def _schema(engine: Any, wait_s: float) -> Any:
    """Where the schema stands, once the database answers (within `wait_s`)."""
    from controller.db.engine import schema

    deadline = time.monotonic() + wait_s
    said = False
    while True:
        try:
            return schema(engine)
        except UnavailableError as e:
            if time.monotonic() + POLL_S > deadline:
                raise fail(str(e), Exit.USAGE) from None
            if not said:
                err.print(f"waiting up to {wait_s:.0f} s for the database to answer …")
                said = True
            time.sleep(POLL_S)


@db_app.command("upgrade")
def db_upgrade(wait: Wait = 0) -> None:
    """Apply every pending migration (a schema already at or past this code's head is left)."""
    from controller.db.engine import upgrade
    from controller.db.revisions import SchemaState

    setup_logging(True)
    with errors_to_exit():
        engine = _engine("upgrade")
        found = _schema(engine, wait)
        if found.state is SchemaState.AHEAD_READABLE:  # a rollback past additive migrations
            err.print(f"{found.describe()}; nothing to upgrade")
            return
        upgrade(engine)  # refuses a newer schema it cannot run on, naming the way out
    err.print("database is at the latest migration")


@db_app.command("current")
def db_current(wait: Wait = 0) -> None:
    """Print the database's revision, this code's head, and whether this code runs on it."""
    with errors_to_exit():
        found = _schema(_engine("current"), wait)
    typer.echo(f"database: {found.current or '-'}\ncode head: {found.head}\n"
               f"state: {found.state.value}")


@db_app.command("check")
def db_check(wait: Wait = 0) -> None:
    """Exit 0 if this code can run on the database's schema, 1 (saying why) if not."""
    with errors_to_exit():
        found = _schema(_engine("check"), wait)
    if not found.usable:
        raise fail(found.describe(), Exit.FAILED)
    err.print(found.describe())


@db_app.command("downgrade")
def db_downgrade(
    revision: Annotated[str, typer.Argument(help="The revision to go back to (see `db current`).")],
    yes: Annotated[bool, typer.Option("--yes", help="Really drop what the newer migrations added.")]
    = False,
    wait: Wait = 0,
) -> None:
    """Undo migrations down to REVISION, with the release that made them.

    Before a rollback past a migration that is not additive (docs/storage.md#rollbacks).
    """
    from controller.db.engine import downgrade
    from controller.db.revisions import known_revisions

    setup_logging(True)
    with errors_to_exit():
        engine = _engine("downgrade")
        found = _schema(engine, wait)
        known = known_revisions()
        if revision not in known:
            raise fail(f"unknown revision {revision!r}; this code knows {', '.join(known)}")
        if found.current not in known:
            raise fail(f"{found.describe()}; downgrade with the release that made it")
        undo = known[known.index(found.current):known.index(revision)]
        if not undo:
            err.print(f"database already at or below {revision}: nothing to undo")
            return
        if not yes:
            raise fail(f"this would undo {len(undo)} migration(s): {', '.join(undo)}, and drop "
                       "what they added; run again with --yes to do it")
        downgrade(engine, revision)
    err.print(f"database downgraded to {revision}")

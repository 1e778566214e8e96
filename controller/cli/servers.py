"""Which controller a command talks to, decided without ever guessing.

- `--server URL` / `SIMPLE_SERVER=URL`: a served controller, over HTTP.
- Neither: the embedded controller, in this process — unless `--require-server` (or
  `SIMPLE_REQUIRE_SERVER=1`) says a pipeline must never run anything on its runner.
- Set but empty (`--server ""`, `SIMPLE_SERVER=`), as a CI secret withheld from a fork's
  pull request expands: an error (exit 2), never the embedded controller in disguise.

The embedded controller needs the `server` extra (FastAPI, uvicorn, SQLAlchemy …); the
base install is the client only, so without it starting one says in one line what to
install. Nothing here imports a server module.
"""

from __future__ import annotations

import os
from importlib.util import find_spec

import typer

from controller.cli.exits import Exit, fail
from controller.extras import PACKAGE

REQUIRE_ENV = "SIMPLE_REQUIRE_SERVER"
# The top-level modules the `server` extra installs that the embedded controller imports.
SERVER_MODULES = ("fastapi", "uvicorn", "sqlalchemy", "alembic", "pydantic_settings", "jinja2")


def checked_server(
    ctx: typer.Context, param: typer.CallbackParam, value: str | None
) -> str | None:
    """The `--server` option's callback: an empty URL, given or from the environment, is
    exit 2 in one line (click reads an empty variable as unset)."""
    source = ctx.get_parameter_source(param.name or "")  # typer's own click: compare names
    from_env = source is not None and source.name == "ENVIRONMENT"
    if value is not None and not value.strip() and not from_env:
        raise fail(
            "--server is empty: give the controller's URL, or leave the option out "
            "to use the embedded controller", Exit.USAGE,
        )
    if (value is None or from_env) and not os.environ.get("SIMPLE_SERVER", "x").strip():
        raise fail(
            "SIMPLE_SERVER is set but empty (a CI secret or variable this job cannot "
            "read?): set it to the controller's URL, or unset it to use the embedded "
            "controller", Exit.USAGE,
        )
    return value.strip() if value else value


def require_server(enabled: bool) -> None:
    """`--require-server`: remembered for the command that follows (its own options)."""
    if enabled:
        os.environ[REQUIRE_ENV] = "1"


def server_required() -> bool:
    return os.environ.get(REQUIRE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def embedded_allowed(what: str = "this command") -> None:
    """Raise exit 2 unless an embedded controller may start here, and can."""
    if server_required():
        raise fail(
            f"--require-server ({REQUIRE_ENV}): {what} needs --server URL or SIMPLE_SERVER; "
            "refusing to start an embedded controller on this machine", Exit.USAGE,
        )
    server_extra_installed(
        f"{what} without --server starts the embedded controller, which", " (or give --server URL)"
    )


def server_extra_installed(what: str, alternative: str = "") -> None:
    """Raise exit 2 in one line naming the extra when the server's modules are missing."""
    missing = [module for module in SERVER_MODULES if find_spec(module) is None]
    if missing:
        raise fail(
            f"{what} needs the 'server' extra ({', '.join(missing)} not installed): "
            f"pip install '{PACKAGE}[server]'{alternative}",
            Exit.USAGE,
        )


def version_callback(value: bool) -> None:
    if value:
        from controller import __version__

        print(f"simplectl {__version__}")
        raise typer.Exit(0)

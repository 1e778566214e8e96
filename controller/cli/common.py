"""What every `simplectl` command shares: settings, the API client, errors to exit codes.

Import-light: the client paths run on the base install (httpx, typer, rich), so server
modules (settings, the embedded controller) are imported only where they are used.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from controller.cli.client import ApiClient, ApiError, Unreachable
from controller.cli.exits import Exit, err, fail
from controller.cli.servers import checked_server, embedded_allowed
from controller.errors import ConfigError, SimpleError

if TYPE_CHECKING:
    from controller.settings import Settings

class Priority(StrEnum):
    """The planner's priorities (controller.planning.model.Priority; a test keeps them equal)."""

    SPEED = "speed"
    COST = "cost"
    BALANCED = "balanced"


# The most sandboxes one GET /v1/runs/{id} returns (controller.runs.SANDBOX_PAGE_MAX).
SANDBOX_PAGE_MAX = 1000


__all__ = ["Exit", "err", "fail"]  # re-exported: every command imports them from here

RUN_EXIT = {
    "succeeded": Exit.OK,
    "failed": Exit.FAILED,
    "budget_exceeded": Exit.BUDGET,
    "cancelled": Exit.CANCELLED,
}

Server = Annotated[
    str | None,
    typer.Option(
        "--server",
        envvar="SIMPLE_SERVER",
        callback=checked_server,
        help="Controller URL; default: local embedded (empty: an error).",
    ),
]
TOKEN_ON_COMMAND_LINE = (
    "warning: --token puts the token in this command line, which every local user (and "
    "every process sandbox) can read in /proc/<pid>/cmdline; use SIMPLE_TOKEN, "
    "SIMPLE_TOKEN_FILE or --token-file instead"
)


def _warn_on_command_line(ctx: typer.Context, param: typer.CallbackParam, value: str | None
                          ) -> str | None:
    """The --token callback: a token given on the command line works, with a warning."""
    source = ctx.get_parameter_source(param.name) if param.name else None
    if value and getattr(source, "name", None) == "COMMANDLINE":  # typer's own click
        err.print(TOKEN_ON_COMMAND_LINE, highlight=False, soft_wrap=True)
    return value


def read_token_file(path: Path) -> str:
    """The token in a file (its first line), e.g. a mounted Secret or a 0600 file."""
    try:
        token = path.read_text().strip().splitlines()
    except OSError as e:
        raise fail(f"cannot read the token file {path}: {e.strerror or e}") from None
    if not token or not token[0].strip():
        raise fail(f"the token file {path} is empty")
    return token[0].strip()


Token = Annotated[
    str | None,
    typer.Option(
        "--token", envvar="SIMPLE_TOKEN", callback=_warn_on_command_line,
        help="API token for --server (prefer SIMPLE_TOKEN or --token-file: a command line "
        "is readable by every local user).",
    ),
]
TokenFile = Annotated[
    Path | None,
    typer.Option(
        "--token-file", envvar="SIMPLE_TOKEN_FILE",
        help="File holding the API token for --server (first line).",
    ),
]
Catalogs = Annotated[
    list[Path] | None, typer.Option("--catalog", help="Extra catalog dir (repeatable).")
]
Verbose = Annotated[bool, typer.Option("--verbose", "-v", help="Log the controller's work.")]

_DURATION = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s?)?")


def parse_duration(text: str) -> float:
    """Seconds in `text`: 900, 90s, 15m, 1h30m. ValueError when it is none of these."""
    match = _DURATION.fullmatch(text.strip())
    if not text.strip() or match is None:
        raise ValueError(f"{text!r} is not a duration (e.g. 30s, 15m, 1h)")
    hours, minutes, seconds = match.groups()
    return int(hours or 0) * 3600 + int(minutes or 0) * 60 + float(seconds or 0)


def _wait_timeout(value: str | float) -> float:
    if isinstance(value, int | float):  # the default
        return float(value)
    try:
        return parse_duration(value)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None


WaitTimeout = Annotated[
    float,
    typer.Option(
        "--wait-timeout",
        envvar="SIMPLE_WAIT_TIMEOUT",
        parser=_wait_timeout,
        metavar="DURATION",
        show_default="15m",
        help="With --server: how long to wait for a controller that went away "
        "(restart, upgrade, failover) before giving up with exit 5: 30s, 15m, 1h.",
    ),
]
DEFAULT_WAIT_TIMEOUT_S = 900.0


def cli_settings(catalog: list[Path] | None = None, **overrides: Any) -> Settings:
    """The embedded controller's settings (needs the `server` extra: see embedded_allowed)."""
    from controller.settings import load_settings

    try:
        settings = load_settings()
    except ConfigError as e:  # callers such as `serve` run it outside errors_to_exit
        raise fail(str(e)) from None
    update = {k: v for k, v in overrides.items() if v is not None}
    if catalog:
        update["catalog_dirs"] = [*settings.catalog_dirs, *catalog]
    return settings.model_copy(update=update)


@contextmanager
def errors_to_exit() -> Iterator[None]:
    """Map errors to one clear line and an exit code."""
    try:
        yield
    except ConfigError as e:  # a setting or a missing extra: the user's to fix
        raise fail(str(e), Exit.USAGE) from None
    except Unreachable as e:
        raise fail(str(e), Exit.UNREACHABLE) from None
    except ApiError as e:
        status = e.status or 0
        raise fail(str(e), Exit.USAGE if 400 <= status < 500 else Exit.FAILED) from None
    except SimpleError as e:
        raise fail(str(e), Exit.USAGE if e.status_code < 500 else Exit.FAILED) from None


@contextmanager
def api_client(
    server: str | None, token: str | None, catalog: list[Path] | None = None
) -> Iterator[ApiClient]:
    """A client of --server, or of a local embedded controller (no reconciler started)."""
    if server:
        if catalog:
            raise fail(
                "--catalog applies to the embedded controller; with --server, "
                "add catalogs on the server (SIMPLE_CATALOG_DIRS)"
            )
        yield ApiClient.remote(server, token)
        return
    embedded_allowed()
    from controller.cli.embedded import EmbeddedServer

    with EmbeddedServer(
        cli_settings(catalog), start_controller=False, session_token=True
    ) as embedded:
        client = ApiClient.remote(embedded.url, embedded.token)
        try:
            yield client
        finally:
            client.http.close()


def run_body(
    names: list[str],
    budget: float | None,
    priority: Priority | None,
    parallel: int | None,
    query: str | None,
    seed: int,
    confirm_over: bool = False,
) -> dict[str, Any]:
    """The body of POST /v1/runs and /v1/plans; a priority not chosen is not sent, so a
    priority read from the query applies (an explicit one wins over it)."""
    body: dict[str, Any] = {
        "confirm_over": confirm_over,
        "names": names,
        "budget_usd": budget,
        "max_parallel": parallel,
        "query": query,
        "seed": seed,
    }
    if priority is not None:
        body["priority"] = priority.value
    return body


def setup_logging(verbose: bool) -> None:
    """Logs to stderr, as SIMPLE_LOG_FORMAT says (text or json), tokens redacted."""
    from controller.logs import setup_logging as setup

    log_format = "json" if os.environ.get("SIMPLE_LOG_FORMAT", "").lower() == "json" else "text"
    setup(logging.INFO if verbose else logging.WARNING, log_format)

"""simplectl's exit codes and its one way to fail: one line on stderr, then the code."""

from __future__ import annotations

from enum import IntEnum

import typer
from rich.console import Console
from rich.markup import escape

err = Console(stderr=True, markup=False)


class Exit(IntEnum):
    """simplectl's exit codes (docs/ci.md has the table)."""

    OK = 0
    FAILED = 1  # the run ended with a sandbox that failed
    USAGE = 2  # usage, input or setting error; nothing was started
    BUDGET = 3  # the budget stopped the run
    CANCELLED = 4  # the run was cancelled (by anyone, or by our SIGINT/SIGTERM)
    UNREACHABLE = 5  # the controller could not be reached (within --wait-timeout)
    NEEDS_YES = 6  # `ask` would start something and waits for a yes (--yes)


def fail(message: str, code: Exit = Exit.USAGE) -> typer.Exit:
    err.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True, markup=True)
    return typer.Exit(int(code))

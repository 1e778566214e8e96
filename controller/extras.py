"""Optional dependencies ("extras"): a backend or store whose extra is not installed is
refused at start with one line naming the extra to install, never an ImportError later."""

from __future__ import annotations

from importlib.util import find_spec

from controller.errors import MissingExtraError

PACKAGE = "simple-orchestrator"

# extra -> the top-level modules it provides (what pyproject's extra installs)
EXTRAS: dict[str, tuple[str, ...]] = {
    "docker": ("docker", "requests"),
    "kubernetes": ("kubernetes",),
    "postgres": ("psycopg",),
    "s3": ("boto3", "botocore"),
}


def require_extra(extra: str, what: str) -> None:
    """Raise MissingExtraError when a module of `extra` cannot be imported."""
    missing = [module for module in EXTRAS[extra] if find_spec(module) is None]
    if missing:
        raise MissingExtraError(
            f"{what} needs the '{extra}' extra ({', '.join(missing)} not installed)",
            hint=f"pip install '{PACKAGE}[{extra}]'",
        )

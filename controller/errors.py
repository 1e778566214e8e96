"""SIMPLE's error tree, in one place.

Every error names the thing, the reason, and what to do (`hint`). The API maps
these to HTTP responses in `controller.api.errors`; the CLI maps them to exit codes.
"""

from __future__ import annotations


class SimpleError(Exception):
    """Base of every error SIMPLE raises on purpose."""

    status_code = 500
    code = "internal_error"
    retry_after_s: int | None = None  # sent as Retry-After: when to try again

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} (hint: {self.hint})" if self.hint else self.message


class InputError(SimpleError):
    """The request or a file given by the user is wrong."""

    status_code = 422
    code = "invalid_input"

    def __init__(self, message: str, *, hint: str | None = None, field: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.field = field


class CatalogError(InputError):
    """A catalog file is malformed; the message names the file, template and field."""

    code = "invalid_catalog"


class UnknownNameError(InputError):
    """A template, suite or category that the catalog does not have."""

    code = "unknown_name"


class AmbiguousRequestError(InputError):
    """A free-text request that could mean several things, or names nothing: pick one."""

    code = "ambiguous_request"

    def __init__(self, choices: list[str]) -> None:
        super().__init__(
            "the request is ambiguous or names nothing to run; it could be: " + "; ".join(choices),
            hint="name one of these (e.g. its suite) in the query, or ask POST /v1/chat, "
            "which answers with choices to pick from",
            field="query",
        )
        self.choices = choices


class NotFoundError(SimpleError):
    status_code = 404
    code = "not_found"


class ConflictError(SimpleError):
    status_code = 409
    code = "conflict"


class UnauthorizedError(SimpleError):
    status_code = 401
    code = "unauthorized"


class ForbiddenError(SimpleError):
    status_code = 403
    code = "forbidden"


class PayloadTooLargeError(SimpleError):
    status_code = 413
    code = "payload_too_large"


class QuotaExceededError(SimpleError):
    """A caller used up a per-sandbox or per-server allowance (events, log followers)."""

    status_code = 429
    code = "quota_exceeded"


class ConfigError(SimpleError):
    """A controller setting is wrong; raised at start."""

    status_code = 500
    code = "invalid_config"


class MissingExtraError(ConfigError):
    """A backend or store was asked for whose optional dependencies are not installed."""

    code = "missing_extra"


class UnavailableError(SimpleError):
    """A dependency (database, store, backend) cannot be reached right now."""

    status_code = 503
    code = "unavailable"

    def __init__(
        self, message: str, *, hint: str | None = None, retry_after_s: int | None = None
    ) -> None:
        super().__init__(message, hint=hint)
        self.retry_after_s = retry_after_s


class BusyError(SimpleError):
    """The controller is saturated (e.g. its ingest queue is full); try again later."""

    status_code = 429
    code = "busy"

    def __init__(self, message: str, *, hint: str | None = None, retry_after_s: int = 1) -> None:
        super().__init__(message, hint=hint)
        self.retry_after_s = retry_after_s


class FencedError(SimpleError):
    """A reconciler that no longer leads (its lease epoch is stale) tried to act."""

    status_code = 503
    code = "not_leader"

    def __init__(self, message: str) -> None:
        super().__init__(
            message, hint="another reconciler leads now; this one stands by until it may lead"
        )


class BackendError(SimpleError):
    """A backend call failed. `transient` says whether retrying may help."""

    status_code = 502
    code = "backend_error"

    def __init__(self, message: str, *, hint: str | None = None, transient: bool = False) -> None:
        super().__init__(message, hint=hint)
        self.transient = transient


class StoreError(SimpleError):
    """The object store refused or failed a call."""

    status_code = 502
    code = "store_error"

    def __init__(self, message: str, *, hint: str | None = None, transient: bool = True) -> None:
        super().__init__(message, hint=hint)
        self.transient = transient


class SnapshotRejected(SimpleError):
    """A sandbox's snapshot failed validation; nothing from it was loaded."""

    status_code = 422
    code = "snapshot_rejected"

"""Secrets of the sandbox contract: per-attempt tokens and the URLs a controller signs.

Only hashes of tokens are stored. Whose token a request carries is decided once, here
(`token_holder`), for the body guard and for ingestion alike, in constant time.

URL signatures are made by a `Signer`, one per controller, keyed by that controller's
signing key together with the attempt's token hash: the database holds the hashes,
never the key, so reading it is not enough to forge an upload, and two controllers in
one process never accept each other's URLs. The key comes from SIMPLE_SIGNING_KEY or a
file in the data directory (mode 0600).
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import os
import secrets
from pathlib import Path

from sqlalchemy import Connection, select

from controller.db.schema import sandboxes


def load_signing_key(path: Path, given: str | None = None) -> bytes:
    """`given` (SIMPLE_SIGNING_KEY), else the key in `path`, created (0600) on first use."""
    if given:
        return given.encode()
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass
    key = secrets.token_bytes(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(key)
    return key


def new_token() -> str:
    return secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_matches(token: str, token_hash: str | None) -> bool:
    """Whether `token` is the one whose hash is `token_hash`. Constant time."""
    return token_hash is not None and hmac.compare_digest(hash_token(token), token_hash)


class TokenHolder(enum.Enum):
    """Whose sandbox token a request carries."""

    THIS_SANDBOX = "this sandbox"
    ANOTHER_SANDBOX = "another sandbox"
    NOBODY = "nobody"


def token_holder(conn: Connection, token: str, token_hash: str | None) -> TokenHolder:
    """Whose `token` is: the sandbox whose stored hash is `token_hash` (None: no such
    sandbox, or none launched), another sandbox's, or nobody's. The one sandbox-token
    check: the own hash is compared in constant time; another holder is looked up by the
    token's hash in the database's index (its timing tells nothing of the token)."""
    if token_matches(token, token_hash):
        return TokenHolder.THIS_SANDBOX
    other = conn.execute(
        select(sandboxes.c.id).where(sandboxes.c.token_hash == hash_token(token)).limit(1)
    ).first()
    return TokenHolder.NOBODY if other is None else TokenHolder.ANOTHER_SANDBOX


class Signer:
    """Signs and checks the URLs one controller gives its sandboxes, with its own key.

    A signature covers one attempt of one sandbox and one `purpose` (`snapshot`,
    `input:items`, `input:resume`, `input:stage`), so one URL cannot stand in for another.
    """

    __slots__ = ("_key",)

    def __init__(self, key: bytes) -> None:
        if not key:
            raise ValueError("a signing key must not be empty: set SIMPLE_SIGNING_KEY or let "
                             "the controller create <data_dir>/signing.key")
        self._key = key

    @classmethod
    def load(cls, path: Path, given: str | None = None) -> Signer:
        """The signer of `given` (SIMPLE_SIGNING_KEY), else of the key file at `path`."""
        return cls(load_signing_key(path, given))

    @classmethod
    def ephemeral(cls) -> Signer:
        """A signer with a random key of its own (a reconciler made without a controller)."""
        return cls(secrets.token_bytes(32))

    def __repr__(self) -> str:
        return "Signer(<key hidden>)"

    def sign(self, token_hash: str, sandbox_id: str, attempt: int, purpose: str) -> str:
        """The signature of one URL of one attempt (hex SHA-256 HMAC)."""
        attempt_key = hmac.new(self._key, token_hash.encode(), hashlib.sha256).digest()
        message = f"{sandbox_id}:{attempt}:{purpose}".encode()
        return hmac.new(attempt_key, message, hashlib.sha256).hexdigest()

    def verify(
        self, signature: str, token_hash: str | None, sandbox_id: str, attempt: int, purpose: str
    ) -> bool:
        """Whether `signature` is this signer's for that URL. Constant time."""
        # An unknown sandbox costs the same HMAC as a known one: its answer, and its time,
        # say nothing about which ids exist.
        expected = self.sign(token_hash or "0" * 64, sandbox_id, attempt, purpose)
        return hmac.compare_digest(signature.encode(), expected.encode()) and bool(token_hash)

"""Secrets of the sandbox contract: per-attempt tokens and self-authorising upload URLs.

Only hashes are stored. Comparisons are constant-time. URL signatures are keyed by
the controller's signing key together with the attempt's token hash: the database
holds the hashes, never the key, so reading it is not enough to forge an upload.
The key comes from SIMPLE_SIGNING_KEY or a file in the data directory (mode 0600).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

# Until the controller sets its own (at start), a random key of this process.
_signing_key: bytes = secrets.token_bytes(32)


def set_signing_key(key: bytes) -> None:
    """The key every URL signature of this process is made and checked with."""
    global _signing_key
    _signing_key = key


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


def _signing_key_for(token_hash: str) -> bytes:
    return hmac.new(_signing_key, token_hash.encode(), hashlib.sha256).digest()


def new_token() -> str:
    return secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_matches(token: str, token_hash: str | None) -> bool:
    return token_hash is not None and hmac.compare_digest(hash_token(token), token_hash)


def upload_signature(
    token_hash: str, sandbox_id: str, attempt: int, purpose: str = "snapshot"
) -> str:
    """Signs one of the controller's URLs for an attempt (its snapshot upload, or an input:
    `input:items`, `input:resume`, `input:stage`) with the signing key and the attempt's
    token hash; `purpose` keeps one URL from standing in for another."""
    message = f"{sandbox_id}:{attempt}:{purpose}".encode()
    return hmac.new(_signing_key_for(token_hash), message, hashlib.sha256).hexdigest()


def signature_matches(
    signature: str,
    token_hash: str | None,
    sandbox_id: str,
    attempt: int,
    purpose: str = "snapshot",
) -> bool:
    if token_hash is None:
        return False
    expected = upload_signature(token_hash, sandbox_id, attempt, purpose)
    return hmac.compare_digest(signature.encode(), expected.encode())

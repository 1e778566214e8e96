"""Secrets of the sandbox contract: per-attempt tokens and self-authorising upload URLs.

Only hashes are stored. Comparisons are constant-time.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets


def new_token() -> str:
    return secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_matches(token: str, token_hash: str | None) -> bool:
    return token_hash is not None and hmac.compare_digest(hash_token(token), token_hash)


def upload_signature(
    token_hash: str, sandbox_id: str, attempt: int, purpose: str = "snapshot"
) -> str:
    """Signs the controller's snapshot-upload (or stage-input) URL with the attempt's
    (secret) token hash; `purpose` keeps one URL from standing in for the other."""
    message = f"{sandbox_id}:{attempt}:{purpose}".encode()
    return hmac.new(token_hash.encode(), message, hashlib.sha256).hexdigest()


def input_signature(token_hash: str, sandbox_id: str, attempt: int, kind: str) -> str:
    """Signs the controller's URL of an attempt's input (its items, its checkpoint)."""
    message = f"{sandbox_id}:{attempt}:input:{kind}".encode()
    return hmac.new(token_hash.encode(), message, hashlib.sha256).hexdigest()


def input_signature_matches(signature: str, token_hash: str | None, sandbox_id: str,
                            attempt: int, kind: str) -> bool:
    if token_hash is None:
        return False
    expected = input_signature(token_hash, sandbox_id, attempt, kind)
    return hmac.compare_digest(signature.encode(), expected.encode())


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

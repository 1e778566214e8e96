"""Every URL an attempt is given to reach its data: its snapshot upload and its inputs.

Each one is a presigned store URL when the store can presign (S3), else one of the
controller's own sandbox routes, signed by the controller's `Signer` for that attempt
and that purpose only. Either way it is valid for the attempt's timeout and
URL_SLACK_S more. The routes that serve the signed ones check them with the same
purposes (`snapshot_purpose`, `input_purpose`).
"""

from __future__ import annotations

from controller.intake.tokens import Signer
from controller.store.base import (
    ObjectStore,
    items_key,
    resume_key,
    snapshot_key,
    stage_input_key,
)

URL_SLACK_S = 600
INPUT_KINDS = ("items", "resume", "stage")
"""SIMPLE_ITEMS_URL, SIMPLE_RESUME_URL and SIMPLE_INPUT_URL, by the route's `{kind}`."""
SNAPSHOT_PURPOSE = "snapshot"


def input_purpose(kind: str) -> str:
    """What a signature of an input URL of `kind` covers."""
    return f"input:{kind}"


def input_key(kind: str, run_id: str, sandbox_id: str, attempt: int, stage: int = 0) -> str:
    """Where the attempt's input of `kind` is kept in the store. Pure."""
    if kind == "items":
        return items_key(run_id, sandbox_id, attempt)
    if kind == "resume":
        return resume_key(run_id, sandbox_id, attempt)
    if kind == "stage":
        return stage_input_key(run_id, stage)
    raise ValueError(f"no input of kind {kind!r}: an attempt's inputs are {INPUT_KINDS}")


class AttemptUrls:
    """The URLs one controller gives its attempts: presigned, or its own routes, signed."""

    def __init__(self, store: ObjectStore, signer: Signer, controller_url: str) -> None:
        self.store, self.signer, self.controller_url = store, signer, controller_url

    def snapshot(
        self, run_id: str, sandbox_id: str, attempt: int, token_hash: str, timeout_s: int
    ) -> str:
        """SIMPLE_SNAPSHOT_URL: where the attempt PUTs its snapshot."""
        key = snapshot_key(run_id, sandbox_id, attempt)
        presigned = self.store.presigned_put_url(key, timeout_s + URL_SLACK_S)
        if presigned:
            return presigned
        return self._signed(f"{sandbox_id}/snapshot", sandbox_id, attempt, token_hash,
                            SNAPSHOT_PURPOSE)

    def input(
        self,
        kind: str,
        run_id: str,
        sandbox_id: str,
        attempt: int,
        token_hash: str,
        timeout_s: int,
        stage: int = 0,
    ) -> str:
        """SIMPLE_ITEMS_URL, SIMPLE_RESUME_URL or SIMPLE_INPUT_URL: where the attempt GETs
        its input of `kind` (written to the store before the URL is handed out)."""
        key = input_key(kind, run_id, sandbox_id, attempt, stage)
        presigned = self.store.presigned_get_url(key, timeout_s + URL_SLACK_S)
        if presigned:
            return presigned
        return self._signed(f"{sandbox_id}/inputs/{kind}", sandbox_id, attempt, token_hash,
                            input_purpose(kind))

    def _signed(
        self, path: str, sandbox_id: str, attempt: int, token_hash: str, purpose: str
    ) -> str:
        signature = self.signer.sign(token_hash, sandbox_id, attempt, purpose)
        return (f"{self.controller_url}/v1/sandboxes/{path}"
                f"?attempt={attempt}&signature={signature}")

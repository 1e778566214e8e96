"""The production store: an S3 bucket (AWS S3, MinIO, any S3-compatible server).

`SIMPLE_STORE_URL=s3://bucket/prefix` names the bucket and the key prefix;
`SIMPLE_S3_ENDPOINT_URL` the server (None = AWS). The controller alone holds
the credentials: a sandbox gets a presigned PUT URL for its own snapshot key,
valid for one key and one method, expiring near the sandbox's timeout.

Every call has connect and read timeouts and a bounded number of retries
(botocore's standard mode). Failures become `StoreError`: transient for
connection errors, timeouts, 5xx and throttling, so the caller retries later;
not transient for refused credentials, a missing bucket or a bad request.
boto3 is imported only here, so the embedded default starts without it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    HTTPClientError,
    IncompleteReadError,
    NoCredentialsError,
    PartialCredentialsError,
)
from botocore.exceptions import ConnectionError as BotoConnectionError

from controller.errors import ConfigError, PayloadTooLargeError, StoreError, UnavailableError
from controller.store.base import CHUNK, ObjectStore, StoredObject

if TYPE_CHECKING:
    from controller.settings import Settings

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 30.0  # per read of a response, not per transfer
MAX_ATTEMPTS = 3  # per call, first included; botocore's standard mode backs off between them
# SigV4 presigned URLs are valid for at most seven days.
MAX_PRESIGN_S = 7 * 24 * 3600
DELETE_BATCH = 1000  # keys per DeleteObjects call, S3's own limit
PROBE_CONNECT_TIMEOUT_S = 2.0
PROBE_READ_TIMEOUT_S = 5.0
_MISSING_KEY_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
_THROTTLING_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestThrottled",
        "TooManyRequests",
        "RequestTimeout",
        "InternalError",
        "ServiceUnavailable",
    }
)
_CREDENTIAL_CODES = frozenset(
    {
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "InvalidToken",
        "ExpiredToken",
        "403",
        "Forbidden",
    }
)
_CREDENTIALS_HINT = (
    "check SIMPLE_S3_ACCESS_KEY_ID and SIMPLE_S3_SECRET_ACCESS_KEY (or boto3's "
    "own AWS_* variables / instance role) and that they may read and write "
    "the bucket"
)


class S3Store(ObjectStore):
    """Objects under `prefix/` in one bucket; keys are the controller's (see base.py)."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str = "us-east-1",
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        public_endpoint_url: str | None = None,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        read_timeout_s: float = READ_TIMEOUT_S,
        max_attempts: int = MAX_ATTEMPTS,
    ) -> None:
        if not bucket:
            raise ConfigError(
                "SIMPLE_STORE_URL names no bucket", hint="use s3://bucket or s3://bucket/prefix"
            )
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.endpoint_url = endpoint_url
        self._where = f"s3://{bucket}/{self.prefix} at {endpoint_url or 'AWS S3'}"
        # One session per store: boto3's default session is not safe to share across threads.
        session = boto3.session.Session(
            aws_access_key_id=access_key_id,
            aws_secret_access_key=secret_access_key,
            region_name=region,
        )

        def client(endpoint: str | None, connect_s: float, read_s: float, attempts: int) -> Any:
            config = Config(
                connect_timeout=connect_s,
                read_timeout=read_s,
                signature_version="s3v4",
                retries={"max_attempts": attempts, "mode": "standard"},
                # S3-compatible servers (MinIO, rclone) are addressed by path; AWS by host.
                s3={"addressing_style": "path" if endpoint else "virtual"},
            )
            return session.client("s3", endpoint_url=endpoint, config=config)

        self._client = client(endpoint_url, connect_timeout_s, read_timeout_s, max_attempts)
        # Readiness probes must answer fast: short timeouts and a single attempt.
        self._probe = client(endpoint_url, PROBE_CONNECT_TIMEOUT_S, PROBE_READ_TIMEOUT_S, 1)
        self._signer = (
            client(public_endpoint_url, connect_timeout_s, read_timeout_s, 1)
            if public_endpoint_url
            else self._client
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> S3Store:
        """The store `SIMPLE_STORE_URL` names; warns at once if it cannot be used."""
        parsed = urlparse(settings.resolved_store_url)
        store = cls(
            parsed.netloc,
            parsed.path,
            endpoint_url=settings.s3_endpoint_url,
            region=settings.s3_region,
            access_key_id=settings.s3_access_key_id,
            secret_access_key=settings.s3_secret_access_key,
            public_endpoint_url=settings.s3_public_endpoint_url,
        )
        try:
            store.check()
        except UnavailableError as e:
            logger.warning("object store not usable yet (/readyz reports it): %s", e)
        return store

    def object_key(self, key: str) -> str:
        """The S3 key of a store key: under the prefix."""
        return f"{self.prefix}/{key}" if self.prefix else key

    def put(self, key: str, data: bytes) -> None:
        try:
            self._client.put_object(
                Bucket=self.bucket, Key=self.object_key(key), Body=data,
                ContentType=_content_type(key),
            )
        except (BotoCoreError, ClientError) as e:
            raise self._error(f"cannot write {key}", e) from e

    def put_file(self, key: str, path: Path) -> None:
        """One PUT whose body botocore reads from the file as it sends it."""
        try:
            with open(path, "rb") as body:
                self._client.put_object(
                    Bucket=self.bucket, Key=self.object_key(key), Body=body,
                    ContentType=_content_type(key),
                )
        except (BotoCoreError, ClientError) as e:
            raise self._error(f"cannot write {key}", e) from e
        except OSError as e:
            raise StoreError(f"cannot read the upload of {key} at {path}: {e}") from e

    def _get_object(self, key: str) -> Any:
        """GetObject's answer, or None for a missing key."""
        try:
            return self._client.get_object(Bucket=self.bucket, Key=self.object_key(key))
        except ClientError as e:
            if _code(e) in _MISSING_KEY_CODES:
                return None
            raise self._error(f"cannot read {key}", e) from e
        except BotoCoreError as e:
            raise self._error(f"cannot read {key}", e) from e

    def open(self, key: str, max_bytes: int | None = None) -> Iterator[bytes] | None:
        response = self._get_object(key)
        if response is None:
            return None
        body = response["Body"]
        size = int(response.get("ContentLength", 0))
        if max_bytes is not None and size > max_bytes:
            body.close()
            raise PayloadTooLargeError(f"{key} is {size} bytes, over the {max_bytes} limit")
        return self._chunks(key, body)

    def _chunks(self, key: str, body: Any) -> Iterator[bytes]:
        try:
            yield from body.iter_chunks(CHUNK)
        except (BotoCoreError, ClientError) as e:
            raise self._error(f"cannot read {key}", e) from e
        finally:
            body.close()

    def get(self, key: str, max_bytes: int | None = None) -> bytes | None:
        response = self._get_object(key)
        if response is None:
            return None
        body = response["Body"]
        try:
            size = int(response.get("ContentLength", 0))
            if max_bytes is not None and size > max_bytes:
                raise PayloadTooLargeError(f"{key} is {size} bytes, over the {max_bytes} limit")
            data: bytes = body.read()
        except (BotoCoreError, ClientError) as e:
            raise self._error(f"cannot read {key}", e) from e
        finally:
            body.close()
        return data

    def size(self, key: str) -> int | None:
        try:
            head = self._client.head_object(Bucket=self.bucket, Key=self.object_key(key))
        except ClientError as e:
            if _code(e) in _MISSING_KEY_CODES:
                return None
            raise self._error(f"cannot look up {key}", e) from e
        except BotoCoreError as e:
            raise self._error(f"cannot look up {key}", e) from e
        return int(head["ContentLength"])

    def list_objects(self, prefix: str) -> list[StoredObject]:
        strip = len(self.prefix) + 1 if self.prefix else 0
        found: list[StoredObject] = []
        try:
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.object_key(prefix)
            )
            for page in pages:
                found.extend(
                    StoredObject(o["Key"][strip:], int(o["Size"])) for o in page.get("Contents", [])
                )
        except (BotoCoreError, ClientError) as e:
            raise self._error(f"cannot list {prefix}", e) from e
        return sorted(found, key=lambda o: o.key)

    def delete_objects(self, keys: Sequence[str]) -> None:
        for start in range(0, len(keys), DELETE_BATCH):
            chunk = keys[start : start + DELETE_BATCH]
            try:
                answer = self._client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": self.object_key(k)} for k in chunk], "Quiet": True},
                )
            except (BotoCoreError, ClientError) as e:
                raise self._error(f"cannot delete {len(chunk)} objects from {chunk[0]}", e) from e
            failed = answer.get("Errors") or []
            if failed:
                first = failed[0]
                raise StoreError(
                    f"cannot delete {len(failed)} of {len(chunk)} objects in {self._where}, "
                    f"first {first.get('Key')}: {first.get('Code')} {first.get('Message', '')}",
                    hint="check that the credentials may delete objects in the bucket",
                    transient=True,
                )

    def presigned_put_url(self, key: str, expires_s: int) -> str:
        """A URL that lets its holder PUT this one key, and nothing else, for `expires_s`."""
        return self._presign("put_object", "PUT", key, expires_s, "an upload")

    def presigned_get_url(self, key: str, expires_s: int) -> str:
        """A URL that lets its holder GET this one key, and nothing else, for `expires_s`."""
        return self._presign("get_object", "GET", key, expires_s, "a download")

    def _presign(self, operation: str, method: str, key: str, expires_s: int, what: str) -> str:
        """One key, one method, for `expires_s` clamped to 1 s .. MAX_PRESIGN_S."""
        try:
            url: str = self._signer.generate_presigned_url(
                operation,
                Params={"Bucket": self.bucket, "Key": self.object_key(key)},
                ExpiresIn=max(1, min(int(expires_s), MAX_PRESIGN_S)),
                HttpMethod=method,
            )
        except BotoCoreError as e:
            raise self._error(f"cannot presign {what} URL for {key}", e) from e
        return url

    def check(self) -> None:
        """Raise UnavailableError naming the reason: bucket missing, credentials, endpoint."""
        try:
            self._probe.head_bucket(Bucket=self.bucket)
        except ClientError as e:
            code, status = _code(e), _status(e)
            if code in ("NoSuchBucket", "404", "NotFound"):
                raise UnavailableError(
                    f"S3 bucket {self.bucket!r} does not exist ({self._where})",
                    hint=f"create it (`mc mb ALIAS/{self.bucket}` or `aws s3 mb "
                    f"s3://{self.bucket}`) or fix SIMPLE_STORE_URL",
                ) from e
            if code in _CREDENTIAL_CODES or status == 403:
                raise UnavailableError(
                    f"S3 refused the credentials for bucket {self.bucket!r} ({self._where}): "
                    f"{_describe(e)}",
                    hint=_CREDENTIALS_HINT,
                ) from e
            raise UnavailableError(
                f"S3 store {self._where} answered {_describe(e)}", hint="see the S3 server's log"
            ) from e
        except (NoCredentialsError, PartialCredentialsError) as e:
            raise UnavailableError(
                f"no S3 credentials for {self._where}: {e}", hint=_CREDENTIALS_HINT
            ) from e
        except BotoCoreError as e:
            raise UnavailableError(
                f"S3 endpoint unreachable ({self._where}): {e}",
                hint="check SIMPLE_S3_ENDPOINT_URL and that the S3 server is up",
            ) from e

    def _error(self, what: str, e: Exception) -> StoreError:
        """Our error for a boto error, transient when retrying later may help."""
        message = f"{what} in {self._where}: {_describe(e)}"
        if isinstance(e, ClientError):
            code, status = _code(e), _status(e)
            if status >= 500 or status == 429 or code in _THROTTLING_CODES:
                return StoreError(
                    message, hint="the S3 server is busy or failing; retried later", transient=True
                )
            if code == "NoSuchBucket":
                return StoreError(
                    message,
                    hint=f"create the bucket {self.bucket!r} or fix SIMPLE_STORE_URL",
                    transient=False,
                )
            if code in _CREDENTIAL_CODES or status == 403:
                return StoreError(message, hint=_CREDENTIALS_HINT, transient=False)
            return StoreError(message, transient=False)
        if isinstance(e, BotoConnectionError | HTTPClientError | IncompleteReadError):
            return StoreError(
                message, hint="check that the S3 server is up; retried later", transient=True
            )
        if isinstance(e, NoCredentialsError | PartialCredentialsError):
            return StoreError(message, hint=_CREDENTIALS_HINT, transient=False)
        return StoreError(message, transient=False)


def _content_type(key: str) -> str:
    return "text/plain; charset=utf-8" if key.endswith(".log") else "application/octet-stream"


def _code(e: ClientError) -> str:
    return str(e.response.get("Error", {}).get("Code", ""))


def _status(e: ClientError) -> int:
    return int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)


def _describe(e: Exception) -> str:
    if isinstance(e, ClientError):
        error = e.response.get("Error", {})
        message = error.get("Message") or ""
        return f"HTTP {_status(e)} {error.get('Code', '')}{': ' + message if message else ''}"
    return f"{type(e).__name__}: {e}"

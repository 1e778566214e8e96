"""Object stores for snapshots and archived logs: a local directory or S3."""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlparse

from controller.errors import ConfigError
from controller.extras import require_extra

if TYPE_CHECKING:
    from controller.settings import Settings
    from controller.store.base import ObjectStore


def create_store(settings: Settings) -> ObjectStore:
    """The store `SIMPLE_STORE_URL` names (file:///dir or s3://bucket/prefix)."""
    url = settings.resolved_store_url
    scheme = urlparse(url).scheme
    if scheme == "file":
        from controller.store.local import LocalStore

        return LocalStore.from_url(url)
    if scheme == "s3":
        require_extra("s3", "an s3:// SIMPLE_STORE_URL")
        from controller.store.s3 import S3Store

        return S3Store.from_settings(settings)
    raise ConfigError(
        f"unsupported SIMPLE_STORE_URL {url!r}", hint="use file:///dir or s3://bucket/prefix"
    )

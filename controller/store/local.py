"""The embedded default store: a local directory; sandboxes upload through the controller."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlparse

from controller.errors import PayloadTooLargeError, StoreError, UnavailableError
from controller.store.base import ObjectStore


class LocalStore(ObjectStore):
    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)

    @classmethod
    def from_url(cls, url: str) -> LocalStore:
        return cls(Path(unquote(urlparse(url).path)))

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if not path.is_relative_to(self.root.resolve()):
            raise StoreError(f"store key {key!r} escapes the store", transient=False)
        return path

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".upload-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, path)
        except OSError as e:
            Path(tmp).unlink(missing_ok=True)
            raise StoreError(f"cannot write {key} to {self.root}: {e}") from e

    def get(self, key: str, max_bytes: int | None = None) -> bytes | None:
        path = self._path(key)
        try:
            size = path.stat().st_size
            if max_bytes is not None and size > max_bytes:
                raise PayloadTooLargeError(f"{key} is {size} bytes, over the {max_bytes} limit")
            return path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise StoreError(f"cannot read {key} from {self.root}: {e}") from e

    def size(self, key: str) -> int | None:
        try:
            return self._path(key).stat().st_size
        except FileNotFoundError:
            return None

    def check(self) -> None:
        if not os.access(self.root, os.W_OK):
            raise UnavailableError(
                f"store directory {self.root} is not writable",
                hint="fix its permissions or set SIMPLE_STORE_URL",
            )

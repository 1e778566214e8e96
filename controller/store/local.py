"""The embedded default store: a local directory; sandboxes upload through the controller."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from controller.errors import PayloadTooLargeError, StoreError, UnavailableError
from controller.store.base import CHUNK, ObjectStore, StoredObject

STAGING = ".staging"  # uploads being received: inside the store, renamed into place


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

    def staging_dir(self) -> Path:
        staging = self.root / STAGING
        staging.mkdir(mode=0o700, exist_ok=True)
        return staging

    def put_file(self, key: str, path: Path) -> None:
        target = self._path(key)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.replace(path, target)  # the staging directory is on the store's disk
            except OSError:  # another file system: copy beside the target, then rename
                fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".upload-")
                try:
                    with os.fdopen(fd, "wb") as out, open(path, "rb") as source:
                        shutil.copyfileobj(source, out, CHUNK)
                    os.replace(tmp, target)
                finally:
                    Path(tmp).unlink(missing_ok=True)
        except OSError as e:
            raise StoreError(f"cannot write {key} to {self.root}: {e}") from e

    def open(self, key: str, max_bytes: int | None = None) -> Iterator[bytes] | None:
        path = self._path(key)
        try:
            handle = open(path, "rb")  # noqa: SIM115 - closed by the generator
        except FileNotFoundError:
            return None
        except OSError as e:
            raise StoreError(f"cannot read {key} from {self.root}: {e}") from e
        size = os.fstat(handle.fileno()).st_size
        if max_bytes is not None and size > max_bytes:
            handle.close()
            raise PayloadTooLargeError(f"{key} is {size} bytes, over the {max_bytes} limit")
        return _read_chunks(handle)

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

    def list_objects(self, prefix: str) -> list[StoredObject]:
        root = self.root.resolve()
        # Walk only the deepest directory the prefix names, not the whole store.
        top = self._path(prefix.rpartition("/")[0]) if "/" in prefix else root
        found = []
        try:
            for path in top.rglob("*"):
                key = path.relative_to(root).as_posix()
                if key.startswith(prefix) and path.is_file():
                    found.append(StoredObject(key, path.stat().st_size))
        except FileNotFoundError:  # the directory, or a file in it, went meanwhile
            pass
        except OSError as e:
            raise StoreError(f"cannot list {prefix} in {self.root}: {e}") from e
        return sorted(found, key=lambda o: o.key)

    def delete_objects(self, keys: Sequence[str]) -> None:
        root = self.root.resolve()
        for key in keys:
            path = self._path(key)
            try:
                path.unlink(missing_ok=True)
            except OSError as e:
                raise StoreError(f"cannot delete {key} from {self.root}: {e}") from e
            # Empty directories left behind go too, up to (not including) the root.
            for parent in path.parents:
                if parent == root or not parent.is_relative_to(root):
                    break
                try:
                    parent.rmdir()
                except OSError:  # not empty (or already gone): stop climbing
                    break

    def check(self) -> None:
        if not os.access(self.root, os.W_OK):
            raise UnavailableError(
                f"store directory {self.root} is not writable",
                hint="fix its permissions or set SIMPLE_STORE_URL",
            )


def _read_chunks(handle: Any) -> Iterator[bytes]:
    with handle:
        while chunk := handle.read(CHUNK):
            yield chunk

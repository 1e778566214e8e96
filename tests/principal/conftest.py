"""The built-in catalog, loaded once for the principal's tests."""

from __future__ import annotations

import pytest

from controller.catalog.templates import Catalog, load_catalog
from controller.settings import REPO_CATALOG_DIR


@pytest.fixture(scope="session")
def builtin() -> Catalog:
    return load_catalog([REPO_CATALOG_DIR])

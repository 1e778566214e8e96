"""Secrets a template needs, by reference: which Secret and key, and the name the sandbox
sees it under. The values never enter the catalog, plans, reports or the database."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

SECRET_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
SECRET_AS = re.compile(r"^[A-Z_][A-Z0-9_]*$")


class SecretRefModel(BaseModel):
    """A secret a template needs: key `key` of the secret `name`, handed to the sandbox as
    `as` (an environment variable name; on Kubernetes also a file of that name)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    name: str = Field(description="The Secret (Kubernetes) or directory under "
                      "SIMPLE_TEMPLATE_SECRETS_DIR (Docker, process) holding it")
    key: str = Field(description="The key within it")
    as_: str = Field(alias="as", description="The name the sandbox sees: [A-Z_][A-Z0-9_]*")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not SECRET_NAME.match(value) or len(value) > 253:
            raise ValueError(f"{value!r} must be a Kubernetes object name (a-z, 0-9, '-', '.')")
        return value

    @field_validator("key")
    @classmethod
    def _key(cls, value: str) -> str:
        if not SECRET_KEY.match(value) or value in (".", "..") or len(value) > 253:
            raise ValueError(f"{value!r} must be a Secret key (letters, digits, '-', '_', '.')")
        return value

    @field_validator("as_")
    @classmethod
    def _as(cls, value: str) -> str:
        if not SECRET_AS.match(value) or value.startswith("SIMPLE_") or len(value) > 128:
            raise ValueError(f"{value!r} must be an environment variable name "
                             "([A-Z_][A-Z0-9_]*), not one of SIMPLE_*")
        return value


def _unique(refs: list[SecretRefModel]) -> list[SecretRefModel]:
    names = [r.as_ for r in refs]
    if len(set(names)) != len(names):
        raise ValueError("two secrets are handed over under one name (`as`)")
    return refs


SecretRefs = Annotated[list[SecretRefModel], AfterValidator(_unique), Field(max_length=32)]

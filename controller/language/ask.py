"""A reading that cannot go on without a question: why, and what it could mean instead."""

from __future__ import annotations

from controller.language.choices import Option
from controller.language.lexicon import Meaning


class Ask(Exception):
    """Raised where the reading cannot go on without a question.

    `alternatives` are the meanings group `group` could take (or, with `replaces`, the
    one name of it that could mean several things), each read as the whole request would
    be with it; `options` are choices already made into selections.
    """

    def __init__(self, why: str, group: int | None = None,
                 alternatives: list[tuple[str, list[Meaning]]] | None = None,
                 options: list[Option] | None = None, replaces: Meaning | None = None) -> None:
        super().__init__(why)
        self.why, self.group, self.replaces = why, group, replaces
        self.alternatives = alternatives or []
        self.options = options or []

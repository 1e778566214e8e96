"""`python -m sandbox_image`: run the built-in sandbox runtime (see `sandbox_image.runtime`)."""

import sys

# httpx imports its command line (rich, click, pygments: ~40 ms, half its import) when
# those are installed, as they are beside the controller; the runtime never uses it,
# and every sandbox pays its start-up. A None entry makes that import fail at once,
# which httpx handles (it defines a stub `main` instead).
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]

from sandbox_image.runtime import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())

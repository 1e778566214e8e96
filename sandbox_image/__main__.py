"""`python -m sandbox_image`: run the built-in sandbox runtime (see `sandbox_image.runtime`)."""

from sandbox_image.runtime import main

if __name__ == "__main__":
    raise SystemExit(main())

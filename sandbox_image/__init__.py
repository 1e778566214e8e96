"""SIMPLE's sandbox runtime and the wire contract every sandbox follows.

This package needs only the standard library and httpx; the controller imports
the contract (`sandbox_image.contract`) from here, never the other way round.
"""

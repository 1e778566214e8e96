"""SIMPLE's controller: plans runs, launches sandboxes, ingests events, aggregates results.

Kept import-light on purpose: heavy clients (docker, kubernetes, boto3) load only
inside the modules that use them.
"""

__version__ = "0.1.0"

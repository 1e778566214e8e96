"""The controller's HTTP API (FastAPI)."""

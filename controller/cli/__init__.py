"""`simplectl`: the command line, a thin client of the HTTP API."""

"""`python -m controller.cli` is `simplectl`."""

from controller.cli.main import app

app(prog_name="simplectl")

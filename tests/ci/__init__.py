"""SIMPLE driven from CI: a served controller (`simplectl serve`) with the CLI as its client."""

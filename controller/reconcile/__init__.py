"""Reconcile: the loop that makes what runs match what the database wants.

- `reconciler`: `Reconciler` and its passes (follow, adopt, mark lost, clean up);
- `run_driver`: one active run within a pass (alerts, budget, launches, its end);
- `stopping`: stopping attempts in the background, and again if a stop did not take;
- `pass_reads`: what a pass reads; `staging`, `stage_input`: stage gates and inputs;
- `alerts`: cost alerts raised within a pass;
- `daily_gc`: retention's gc, started once a day (the database remembers when).
"""

"""Reconcile: the loop that makes what runs match what the database wants.

- `reconciler`: `Reconciler` and its passes (launch, stop, adopt, mark lost);
- `pass_reads`: what a pass reads; `staging`, `stage_input`: stage gates and inputs;
- `alerts`: cost alerts raised within a pass.
"""

"""Planning: a catalog and a request become a `Plan` (pure, no I/O).

- `plan`: `PlanRequest`, `Plan`, `plan`;
- `staged`: the plan of a staged run (stages, critical path).
"""

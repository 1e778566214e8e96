"""Planning: a catalog and a request become a `Plan` (pure, no I/O).

- `model`: the values — `Priority`, `PlanRequest`, `Plan` (and its `sandboxes()`),
  `BatchPlan`, `PlannedSandbox`, `Exclusion`;
- `sizing`: the rules both plans share (order, budget, parallelism, expensive, items and
  batches, runtime and cost ranges) and `assemble_plan`, the one place a `Plan` is built;
- `query`: `apply_query`, a free-text query read into the request's fields;
- `plan`: `plan`, the entry point, and the flat plan;
- `staged`: the plan of a staged run (stages, critical path).
"""

"""Results: what a run produced, read back from the database.

- `report`, `report_formats`, `item_results`: the report (JSON, JUnit, Markdown), item rows;
- `ledger`, `verify`: the hash-chained record of every ended attempt, and its check;
- `estimates`: observed costs and runtimes against the catalog's estimates;
- `retention`: what `simplectl gc` removes of runs that ended long ago, and what it keeps;
- `reruns`: what a rerun of an ended run's failures (or of all of it) consists of.
"""

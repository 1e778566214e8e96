"""The principal: plan, run and ask in plain words.

- `numbers`: money, parallelism and time phrases ("$50", "4 at a time", "under 10 minutes");
- `lexicon`: the catalog's names and the seed's words, as token sequences;
- `grammar`: a request read into a `Reading` that explains itself (pure, no I/O);
- `questions`: questions about runs answered from the database;
- `notices`: what a watcher should be told while a run goes;
- `conversation`: turns, choices and confirmations (bounded, in memory);
- `llm`: an optional OpenAI-compatible model that phrases and proposes, never decides.

This package's `__init__` imports nothing: the planner imports `grammar`, and
`conversation` imports the planner.
"""

"""The principal: plan, run and ask in plain words, on top of the controller.

- `questions`: questions about runs answered from the database (`waiting`: what waits and
  why; `compare`: a run against the previous one of the same request; `history`: answers
  across runs: a template's cost, the most expensive, the least reliable, tokens);
- `notices`: what a watcher should be told while a run goes;
- `conversation`: turns, choices and confirmations;
- `assistant`: the conversation's one door for the API and the CLI;
- `llm`: an optional OpenAI-compatible model that phrases and proposes, never decides.

Reading the words themselves is `controller.language`'s (pure, below planning).
"""

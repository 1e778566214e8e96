"""The principal: plan, run and ask in plain words, on top of the controller.

- `questions`: questions about runs answered from the database;
- `notices`: what a watcher should be told while a run goes;
- `conversation`: turns, choices and confirmations;
- `assistant`: the conversation's one door for the API and the CLI;
- `llm`: an optional OpenAI-compatible model that phrases and proposes, never decides.

Reading the words themselves is `controller.language`'s (pure, below planning).
"""

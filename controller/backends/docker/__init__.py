"""The Docker backend: one container per sandbox (`backend`), its spec (`spec`), its network
(`network`), how its containers ended (`exits`) and what the engine's failures mean (`errors`)."""

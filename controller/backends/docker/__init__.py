"""The Docker backend: one container per sandbox (`backend`), its spec (`spec`), its network
(`network`)."""

"""The database: the controller's single source of truth (SQLAlchemy Core)."""

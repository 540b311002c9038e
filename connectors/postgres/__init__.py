"""PostgreSQL connector (in progress: issue 5)."""

__all__: list[str] = []

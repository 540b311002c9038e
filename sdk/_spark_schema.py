"""Spark schemas as the Arrow schemas Spark hands to Python (timestamps in UTC)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

__all__ = ["arrow_schema"]


def arrow_schema(schema: Any) -> pa.Schema:
    """Spark's Arrow schema of ``schema``, timestamps in UTC (PySpark 4.1+ takes the zone, 4.0 assumes UTC)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        return to_arrow_schema(schema, timezone="UTC")
    except TypeError:  # pragma: no cover - PySpark 4.0
        return to_arrow_schema(schema)

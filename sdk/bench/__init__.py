"""Placeholder (being written)."""

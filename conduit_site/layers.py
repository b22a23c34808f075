"""Placeholder; replaced by the SQLite channel layer."""

"""Model fields shared by the apps."""

from __future__ import annotations

from django.db import models


class CodePointCharField(models.CharField):
    """A ``CharField`` compared and sorted code point by code point on every database: SQLite's
    own comparison, and on PostgreSQL the ``"C"`` collation (whatever the database's default).

    On PostgreSQL a b-tree index on such a column serves ``LIKE 'prefix%'`` as it serves
    ``=`` and ranges, so one index does what otherwise takes two (the default operator class,
    and ``varchar_pattern_ops`` for prefixes), and values sort as they do on SQLite."""

    def db_parameters(self, connection):
        parameters = super().db_parameters(connection)
        if connection.vendor == "postgresql" and not parameters.get("collation"):
            parameters["collation"] = "C"
        return parameters

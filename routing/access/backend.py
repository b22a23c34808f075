"""Django's model backend, reading a user's permissions with one raw query instead of two.

Django's :class:`~django.contrib.auth.backends.ModelBackend` reads a user's own permissions and
their groups' permissions with a query each, on the first ``has_perm`` of a request. Every API
request checks one permission (``conduit_site.api.auth``), so this backend reads both sets with one
``UNION`` statement, written out once from the models' tables: building and compiling the same
query through the ORM cost a millisecond a request. Everything else (who may sign in,
superusers, inactive users, the per-object answer) is Django's; a test holds the answers equal
to Django's own backend.
"""

from __future__ import annotations

import functools
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend as DjangoModelBackend
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection


class ModelBackend(DjangoModelBackend):
    """:class:`django.contrib.auth.backends.ModelBackend` with one query for all permissions."""

    def get_all_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        if not user_obj.is_active or user_obj.is_anonymous or obj is not None:
            return set()
        if not hasattr(user_obj, "_perm_cache"):
            with connection.cursor() as cursor:
                if user_obj.is_superuser:
                    cursor.execute(_permissions_sql(everyone=True))
                else:
                    cursor.execute(_permissions_sql(everyone=False), [user_obj.pk, user_obj.pk])
                rows = cursor.fetchall()
            user_obj._perm_cache = {f"{app_label}.{codename}" for app_label, codename in rows}
        return user_obj._perm_cache


@functools.cache
def _permissions_sql(*, everyone: bool) -> str:
    """``(app_label, codename)`` of every permission, or (params: the user's key, twice) of a
    user's own and their groups' permissions."""
    quote = connection.ops.quote_name

    def column(model: Any, field: str) -> str:
        return quote(model._meta.get_field(field).column)

    user = get_user_model()
    own = user._meta.get_field("user_permissions").remote_field.through
    membership = user._meta.get_field("groups").remote_field.through
    granted = Group._meta.get_field("permissions").remote_field.through
    user_fk = user._meta.model_name
    sql = (
        f"SELECT ct.{column(ContentType, 'app_label')}, p.{column(Permission, 'codename')} "
        f"FROM {quote(Permission._meta.db_table)} p JOIN {quote(ContentType._meta.db_table)} ct "
        f"ON ct.{quote(ContentType._meta.pk.column)} = p.{column(Permission, 'content_type')}"
    )
    if everyone:
        return sql
    return (
        f"{sql} WHERE p.{quote(Permission._meta.pk.column)} IN ("
        f"SELECT {column(own, 'permission')} FROM {quote(own._meta.db_table)} "
        f"WHERE {column(own, user_fk)} = %s "
        f"UNION SELECT g.{column(granted, 'permission')} FROM {quote(granted._meta.db_table)} g "
        f"JOIN {quote(membership._meta.db_table)} m ON m.{column(membership, 'group')} = g.{column(granted, 'group')} "
        f"WHERE m.{column(membership, user_fk)} = %s)"
    )

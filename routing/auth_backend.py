"""Django's model backend, reading a user's permissions with one query instead of two.

Django's :class:`~django.contrib.auth.backends.ModelBackend` reads a user's own permissions and
their groups' permissions with a query each, on the first ``has_perm`` of a request. Every API
request checks one permission (``conduit_site.api.auth``), so this backend reads both sets with one
``UNION`` query. Everything else (who may sign in, superusers, inactive users, the per-object
answer) is Django's.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.backends import ModelBackend as DjangoModelBackend
from django.contrib.auth.models import Permission


class ModelBackend(DjangoModelBackend):
    """:class:`django.contrib.auth.backends.ModelBackend` with one query for all permissions."""

    def get_all_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        if not user_obj.is_active or user_obj.is_anonymous or obj is not None:
            return set()
        if not hasattr(user_obj, "_perm_cache"):
            fields = ("content_type__app_label", "codename")
            if user_obj.is_superuser:
                perms = Permission.objects.values_list(*fields)
            else:
                own = Permission.objects.filter(user=user_obj).values_list(*fields).order_by()
                perms = own.union(
                    Permission.objects.filter(group__user=user_obj).values_list(*fields).order_by()
                ).order_by()
            user_obj._perm_cache = {f"{app_label}.{codename}" for app_label, codename in perms}
        return user_obj._perm_cache

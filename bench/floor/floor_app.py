"""The ingestion floor: a minimal Django view behind daphne that stores each request body with
one durable INSERT (SQLite, WAL, synchronous=FULL, BEGIN IMMEDIATE, as Conduit's database).

    FLOOR_DB=/tmp/floor.sqlite3 python -m daphne -p 8001 floor_app:application   (cwd bench/floor)
"""

from __future__ import annotations

import os

import django
from django.conf import settings

settings.configure(
    DEBUG=False,
    SECRET_KEY="floor",
    ALLOWED_HOSTS=["*"],
    ROOT_URLCONF=__name__,
    MIDDLEWARE=[],
    INSTALLED_APPS=[],
    DATABASES={
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ["FLOOR_DB"],
            "OPTIONS": {
                "transaction_mode": "IMMEDIATE",
                "timeout": 30,
                "init_command": "PRAGMA journal_mode=WAL;PRAGMA synchronous=FULL;",
            },
        }
    },
)
django.setup()

from django.core.asgi import get_asgi_application  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.http import JsonResponse  # noqa: E402
from django.urls import path  # noqa: E402
from django.views.decorators.csrf import csrf_exempt  # noqa: E402

with connection.cursor() as cursor:
    cursor.execute("CREATE TABLE IF NOT EXISTS floor (id INTEGER PRIMARY KEY, body BLOB NOT NULL)")
connection.close()


@csrf_exempt
def accept(request, name: str = ""):
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("INSERT INTO floor (body) VALUES (%s)", [request.body])
        seq = cursor.lastrowid
    return JsonResponse({"seq": seq}, status=201)


urlpatterns = [path("api/events", accept), path("hooks/<str:name>", accept)]
application = get_asgi_application()

from django.apps import AppConfig
from django.db.backends.signals import connection_created


class CausalConfig(AppConfig):
    name = "causal"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from infra.private_files import tighten_sqlite_files

        # The ledger's SQLite file holds every Event: readable by its owner only.
        connection_created.connect(tighten_sqlite_files, dispatch_uid="conduit.private_sqlite_files")

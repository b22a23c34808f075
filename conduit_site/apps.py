import gc

from django.apps import AppConfig


class SiteConfig(AppConfig):
    """The site itself: installed last, so that its ``ready`` runs once every app has loaded."""

    name = "conduit_site"
    label = "conduit_site"

    def ready(self) -> None:
        from conduit_site import checks  # noqa: F401 - registers the system checks

        # What loading made (modules, classes, models, settings) lives as long as the process:
        # moved to the collector's permanent generation, it is not walked again by a later
        # collection, nor by the interpreter's own at exit, which otherwise cost every command
        # about 0.1 s. Setup's garbage, if any, is kept: a few objects, once.
        gc.freeze()

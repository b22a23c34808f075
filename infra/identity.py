"""Process identity: the name a loop's claims, leases and heartbeats carry."""

from __future__ import annotations

import os
import socket
import uuid

from django.conf import settings


def host_name() -> str:
    """This host's name in loop identities: ``CONDUIT_HOSTNAME`` when set (one per host or
    container sharing a database), else the system's host name. A loop only judges loops of its
    own host name dead by their pid; those of other hosts lapse with their claims and leases."""
    return getattr(settings, "CONDUIT_HOSTNAME", "") or socket.gethostname()


def loop_identity() -> str:
    """A name for this loop process: host, pid and a random suffix (a pid reused after a restart
    still names another loop)."""
    return f"{host_name()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

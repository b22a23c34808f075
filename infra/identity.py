"""Process identity: the name a loop's claims, leases and heartbeats carry."""

from __future__ import annotations

import os
import socket
import uuid


def loop_identity() -> str:
    """A name for this loop process: host, pid and a random suffix (a pid reused after a restart
    still names another loop)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

"""Helpers for the causal limits' tests: envelopes carrying a planted secret, diagnostic
scans and a subprocess runner that opens the test database independently."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from django.conf import settings

from causal.models import KV, CausalDiagnostic
from causal.services import Envelope
from tests.support import child_env

# Planted in every payload-ish field of test envelopes; no diagnostic may ever contain it.
SECRET = "s3cr3t-planted-7f1c2a"
ROOT_DIR = Path(settings.BASE_DIR)


def envelope(
    name: str, *, source: str = "tests.agent", type: str = "test.derived", **fields: Any
) -> Envelope:
    """An envelope whose data, subject and extensions carry :data:`SECRET`."""
    values: dict[str, Any] = {
        "id": name,
        "source": source,
        "type": type,
        "scope": "acme",
        "subject": f"subject {SECRET}",
        "data": {"token": SECRET, "nested": {"list": [SECRET]}},
        "extensions": {"authorization": SECRET},
    }
    values.update(fields)
    return Envelope(**values)


def diagnostic_fields(diagnostic: CausalDiagnostic) -> dict[str, str]:
    """Every stored column of a diagnostic, as text."""
    return {f.attname: str(getattr(diagnostic, f.attname)) for f in CausalDiagnostic._meta.concrete_fields}


def assert_redacted(diagnostic: CausalDiagnostic) -> None:
    """Fail if any column of the stored diagnostic contains the planted secret."""
    stored = CausalDiagnostic.objects.get(pk=diagnostic.pk)
    for name, text in diagnostic_fields(stored).items():
        assert SECRET not in text, f"diagnostic field {name} leaks the payload: {text!r}"


def bucket_count(root_seq: int, minute_key: str) -> int:
    """Tokens spent in a root's bucket for the minute ``YYYY-MM-DDTHH:MM`` (0 when none)."""
    entry = KV.objects.filter(namespace="core.causal.buckets", key=f"{root_seq}:{minute_key}").first()
    return int(entry.value["count"]) if entry is not None else 0


# A worker process runs on the test database, like any child process of the tests.
worker_env = child_env


class Worker:
    """A running ``derive_worker.py`` process."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process

    def result(self, timeout: float = 120) -> dict[str, Any]:
        """Wait for the worker and return the JSON object it printed last."""
        out, err = self.process.communicate(timeout=timeout)
        assert self.process.returncode == 0, f"worker failed ({self.process.returncode}):\n{err}"
        return json.loads(out.strip().splitlines()[-1])


def start_worker(*args: str, env: dict[str, str] | None = None) -> Worker:
    """Start ``tests/causal/derive_worker.py`` in a fresh interpreter on the test database."""
    process = subprocess.Popen(
        [sys.executable, str(ROOT_DIR / "tests" / "causal" / "derive_worker.py"), *args],
        cwd=ROOT_DIR,
        env=env if env is not None else worker_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return Worker(process)


def run_worker(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> dict[str, Any]:
    """Run a worker to its end and return its JSON result."""
    return start_worker(*args, env=env).result(timeout)

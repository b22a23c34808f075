"""Concurrent sibling quotas and restart-pinned limits (R53, R54, R61): several threads, several
processes, and a "restarted" process with other settings, all on the real database."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from causal.limits import PINS_NAMESPACE, Causal, CausalRefused, Limits
from causal.models import KV, CausalDiagnostic, Event
from tests.causal.factories import EventFactory
from tests.causal.support import bucket_count, envelope, run_worker, start_worker, worker_env

MINUTE = "2026-01-05T12:00"


def derive_concurrently(
    causal: Causal, parents: list[Event], threads: int, per_thread: int
) -> dict[str, int]:
    """``threads`` threads, released together, each deriving ``per_thread`` children of
    ``parents`` (round robin); returns how many were accepted and refused."""
    barrier = threading.Barrier(threads)
    outcomes: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def work(t: int) -> None:
        try:
            barrier.wait()
            for i in range(per_thread):
                parent = parents[(t + i) % len(parents)]
                try:
                    causal.derive(parent=parent, envelope=envelope(f"t{t}-{i}"))
                    outcome = "accepted"
                except CausalRefused:
                    outcome = "refused"
                with lock:
                    outcomes.append(outcome)
        except BaseException as error:  # noqa: BLE001 - reported to the test thread below
            errors.append(error)
        finally:
            connection.close()

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=300)
    assert not errors, errors
    return {"accepted": outcomes.count("accepted"), "refused": outcomes.count("refused")}


@pytest.mark.django_db(transaction=True)
def test_r61_concurrent_sibling_quota_threads_accept_exactly_128(clock):
    root = EventFactory()
    causal = Causal(clock, Limits(max_depth=32, rate_per_minute=128))
    child = causal.derive(parent=root, envelope=envelope("child")).event
    counts = derive_concurrently(causal, [root, child], threads=6, per_thread=25)
    assert counts == {"accepted": 127, "refused": 23}
    assert Event.objects.filter(root_id=root.seq).count() == 128
    assert bucket_count(root.seq, MINUTE) == 128
    # Counted on one row (one root, kind and minute), by concurrent writers.
    (diagnostic,) = CausalDiagnostic.objects.filter(kind="rate_exceeded", root_seq=root.seq)
    assert diagnostic.occurrences == 23


@pytest.mark.django_db(transaction=True)
def test_r61_concurrent_first_derivations_pin_once(clock):
    root = EventFactory()
    causal = Causal(clock, Limits(max_depth=32, rate_per_minute=128))
    counts = derive_concurrently(causal, [root], threads=4, per_thread=3)
    assert counts == {"accepted": 12, "refused": 0}
    assert KV.objects.filter(namespace=PINS_NAMESPACE).count() == 1
    assert bucket_count(root.seq, MINUTE) == 12


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_r61_concurrent_sibling_quota_processes_accept_exactly_128(clock):
    root = EventFactory()
    Causal(clock, Limits(max_depth=32, rate_per_minute=128)).derive(parent=root, envelope=envelope("pin"))
    start_at = time.time() + 3  # after every worker's start-up, so that they overlap
    workers = [
        start_worker(
            *("--at", clock.now.isoformat(), "--parent", str(root.seq), "--count", "50"),
            *("--prefix", f"p{n}", "--start-at", str(start_at)),
        )
        for n in range(3)
    ]
    results = [worker.result() for worker in workers]
    assert sum(r["accepted"] for r in results) == 127
    assert sum(r["refused"] for r in results) == 23
    assert sum(r["replayed"] for r in results) == 0
    assert Event.objects.filter(root_id=root.seq).count() == 128
    assert bucket_count(root.seq, MINUTE) == 128
    (diagnostic,) = CausalDiagnostic.objects.filter(kind="rate_exceeded")
    assert diagnostic.occurrences == 23


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_r53_restarted_process_with_other_settings_keeps_the_pinned_limits(clock):
    root = EventFactory()
    Causal(clock, Limits(max_depth=32, rate_per_minute=128)).derive(parent=root, envelope=envelope("pin"))
    pin_before = KV.objects.get(namespace=PINS_NAMESPACE, key=str(root.seq)).value
    restarted = worker_env(CONDUIT_CAUSAL_MAX_DEPTH="1", CONDUIT_CAUSAL_RATE_PER_MINUTE="2")
    at = clock.now.isoformat()
    chain = run_worker("--at", at, "--parent", str(root.seq), "--count", "5", "--chain", env=restarted)
    assert chain["configured"] == [1, 2]
    assert (chain["accepted"], chain["refused"], chain["replayed"]) == (5, 0, 0)
    assert chain["depths"] == [1, 2, 3, 4, 5]  # deeper than 1, more than 2 this minute
    assert KV.objects.get(namespace=PINS_NAMESPACE, key=str(root.seq)).value == pin_before
    # A root first derived from in the restarted process is pinned with its settings.
    fresh = run_worker(
        *("--at", at, "--new-root", "fresh-root", "--count", "3", "--prefix", "fresh"), env=restarted
    )
    assert (fresh["accepted"], fresh["refused"], fresh["replayed"]) == (2, 1, 0)
    assert KV.objects.get(namespace=PINS_NAMESPACE, key=str(fresh["root_seq"])).value["rate_per_minute"] == 2

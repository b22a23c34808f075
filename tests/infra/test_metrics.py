"""The metric handles record nothing with metrics off, and a batch observed at
once gives the histogram prometheus_client would give observing each value."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY, generate_latest

from infra.metrics import Counter, Histogram

BUCKETS = (0.01, 0.1, 1, 10)
VALUES = [0.0, 0.005, 0.01, 0.010001, 0.1, 0.5, 1, 3, 10, 11, 1e9]


def test_with_metrics_off_a_handle_records_nothing_and_builds_no_metric(settings):
    settings.CONDUIT_METRICS = False
    counter = Counter("test_metrics_off_total", "off", ("scope",))
    histogram = Histogram("test_metrics_off_seconds", "off", buckets=BUCKETS)

    counter.inc(1, "acme")
    counter.inc_counts({("acme",): 2})
    histogram.observe(1.0)
    histogram.observe_many([1.0, 2.0])

    assert counter._metric is None and histogram._metric is None
    assert b"test_metrics_off" not in generate_latest(REGISTRY)


def exposed(name: str) -> list[str]:
    """The exposition's lines of one metric family, its name replaced by ``M``."""
    return sorted(
        line.replace(name, "M")
        for line in generate_latest(REGISTRY).decode().splitlines()
        if line.startswith(name) or (line.startswith("#") and name in line)
    )


@pytest.mark.parametrize("labels", [(), ("acme", "agent")])
def test_observe_many_is_observe_for_each_value(settings, labels):
    settings.CONDUIT_METRICS = True
    names = ("scope", "binding") if labels else ()
    suffix = "labelled" if labels else "plain"
    one_by_one = Histogram(f"test_metrics_each_{suffix}_seconds", "h", names, buckets=BUCKETS)
    at_once = Histogram(f"test_metrics_batch_{suffix}_seconds", "h", names, buckets=BUCKETS)

    for value in VALUES:
        one_by_one.observe(value, *labels)
    at_once.observe_many(VALUES, *labels)
    at_once.observe_many([], *labels)

    assert exposed(f"test_metrics_each_{suffix}_seconds") == exposed(f"test_metrics_batch_{suffix}_seconds")
    assert any(
        'le="+Inf"' in line and line.endswith(f" {len(VALUES)}.0") for line in exposed(one_by_one.name)
    )


def test_add_bucketed_is_observe_for_each_value(settings):
    settings.CONDUIT_METRICS = True
    one_by_one = Histogram("test_metrics_each_db_seconds", "h", buckets=BUCKETS)
    bucketed = Histogram("test_metrics_bucketed_db_seconds", "h", buckets=BUCKETS)
    for value in VALUES:
        one_by_one.observe(value)

    # As the database counts them: how many, their sum, how many at most each bound.
    bucketed.add_bucketed(len(VALUES), sum(VALUES), [sum(v <= b for v in VALUES) for b in BUCKETS])
    bucketed.add_bucketed(0, 0.0, [0] * len(BUCKETS))

    assert exposed("test_metrics_each_db_seconds") == exposed("test_metrics_bucketed_db_seconds")


def test_counts_add_up_per_label_values(settings):
    settings.CONDUIT_METRICS = True
    counter = Counter("test_metrics_counts_total", "c", ("scope", "policy"))

    counter.inc_counts({("acme", "start"): 2, ("acme", "queue"): 0, ("ops", "start"): 1})
    counter.inc(3, "acme", "start")

    lines = exposed("test_metrics_counts_total")
    assert 'M{policy="start",scope="acme"} 5.0' in lines
    assert 'M{policy="start",scope="ops"} 1.0' in lines
    assert not any('policy="queue"' in line for line in lines)


def test_a_metric_whose_folder_cannot_be_written_is_dropped_not_raised(
    settings, tmp_path, monkeypatch, caplog
):
    import infra.metrics

    settings.CONDUIT_METRICS = True
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    monkeypatch.setenv(infra.metrics.MULTIPROC_ENV, str(blocked / "metrics"))
    counter = Counter("test_metrics_unwritable_total", "c", ("scope",))

    counter.inc(1, "acme")
    counter.inc(1, "acme")

    assert [r.getMessage() for r in caplog.records if r.name == "conduit.metrics"] == ["metrics.unavailable"]

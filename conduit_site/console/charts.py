"""Line charts of the home page's trends, drawn on the server as SVG geometry: no script and no
charting library. Each chart carries its title and a one-paragraph summary (the SVG's
``desc``); each span's figures are also one table (:func:`trend_table`, visually hidden), so
that a screen reader gets the figures the pictures show."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from conduit_site.console.templatetags.console_time import timetag
from conduit_site.console.trends import Trend
from infra.words import counted

# The SVG's coordinate system (viewBox) and the plot area inside it.
WIDTH = 640
HEIGHT = 180
LEFT = 48
RIGHT = WIDTH - 12
TOP = 12
BOTTOM = HEIGHT - 26


@dataclass(frozen=True, slots=True)
class Series:
    """One line: its name, CSS class (colour and dash, told apart without colour too), its
    values, and the polylines drawing them (a gap where a value is ``None``)."""

    name: str
    css: str
    values: tuple[float | None, ...]
    lines: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Tick:
    at: float
    label: str


@dataclass(frozen=True, slots=True)
class Chart:
    id: str
    title: str
    summary: str
    unit: str
    series: tuple[Series, ...]
    y_ticks: tuple[Tick, ...]
    x_ticks: tuple[Tick, ...]
    note: str = ""
    # One hover target a bucket, its <title> the bucket's time and every series' value there.
    columns: SafeString = SafeString("")
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    right: int = RIGHT
    top: int = TOP
    bottom: int = BOTTOM


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 5 × 10^k at or above ``value`` (1 for nothing)."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if value <= step * power * (1 + 1e-9):
            return step * power
    return 10 * power  # pragma: no cover - the loop ends at 10


def number(value: float | None, digits: int = 2) -> str:
    """A figure as the charts print it: ``—`` for none, integers without decimals."""
    if value is None:
        return "—"
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.{digits}f}".rstrip("0").rstrip(".")


def seconds(value: float | None) -> str:
    """A latency: milliseconds under a second, seconds above."""
    if value is None:
        return "—"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    return f"{value:,.1f} s"


def _nudge(point: str) -> str:
    x, y = point.split(",")
    return f"{float(x) + 0.5:.1f},{y}"


def line_chart(
    *,
    id: str,
    title: str,
    summary: str,
    unit: str,
    starts: Sequence[datetime],
    series: Sequence[tuple[str, str, Sequence[float | None]]],
    x_labels: Sequence[tuple[int, str]],
    fmt=number,
    note: str = "",
) -> Chart:
    """A chart of ``series`` (name, CSS class, one value per bucket) over the buckets starting
    at ``starts``; ``x_labels`` are (bucket index, label) pairs for the time axis."""
    count = len(starts)
    peak = max((v for _, _, values in series for v in values if v is not None), default=0)
    top_value = nice_ceiling(peak)
    step_x = (RIGHT - LEFT) / max(count - 1, 1)

    def y(value: float) -> float:
        return BOTTOM - (BOTTOM - TOP) * value / top_value

    drawn = []
    for name, css, values in series:
        lines: list[str] = []
        points: list[str] = []
        for index, value in enumerate(values):
            if value is None:
                if points:
                    lines.append(" ".join(points))
                points = []
                continue
            points.append(f"{LEFT + index * step_x:.1f},{y(value):.1f}")
        if points:
            lines.append(" ".join(points))
        # A lone value (its neighbours have none) is drawn as a dot: a round-capped stub.
        lines = [line if " " in line else f"{line} {_nudge(line)}" for line in lines]
        drawn.append(Series(name, css, tuple(values), tuple(lines)))
    y_ticks = tuple(Tick(round(y(v), 1), fmt(v)) for v in (0, top_value / 2, top_value))
    x_ticks = tuple(Tick(round(LEFT + index * step_x, 1), label) for index, label in x_labels)
    columns = bucket_columns(starts, series, unit=unit, fmt=fmt, step_x=step_x)
    return Chart(id, title, summary, unit, tuple(drawn), y_ticks, x_ticks, note, columns=columns)


def bucket_columns(
    starts: Sequence[datetime],
    series: Sequence[tuple[str, str, Sequence[float | None]]],
    *,
    unit: str,
    fmt,
    step_x: float,
) -> SafeString:
    """A transparent column around each bucket's point, whose ``<title>`` (the browser's
    tooltip) says the bucket's age, as the time axis does (a tooltip's text cannot be a
    ``<time>`` the browser shows in its own zone), and each series' value in it; built here, not
    in a template loop, as the table is (a page has eight charts of up to 72 buckets)."""
    half = step_x / 2
    rows = []
    for index, start in enumerate(starts):
        x = max(LEFT + index * step_x - half, LEFT)
        width = min(LEFT + index * step_x + half, RIGHT) - x
        values = ", ".join(f"{name} {fmt(values[index])}" for name, _, values in series)
        when = _bucket_age(starts[-1] - start)
        rows.append((f"{x:.1f}", TOP, f"{width:.1f}", BOTTOM - TOP, f"{when}: {values} ({unit})"))
    return format_html_join(
        "", '<rect class="chart-hit" x="{}" y="{}" width="{}" height="{}"><title>{}</title></rect>', rows
    )


def _bucket_age(age) -> str:
    """How long before the current bucket a bucket starts ("now", "−5 min", "−3 h 20 min")."""
    minutes = int(age.total_seconds()) // 60
    if not minutes:
        return "now"
    if minutes < 120:
        return f"−{minutes} min"
    return f"−{minutes // 60} h" + (f" {minutes % 60} min" if minutes % 60 else "")


def _x_labels(trend: Trend) -> list[tuple[int, str]]:
    """Ages along the time axis (the bucket holding now is "now"): time-zone free."""
    span = trend.span
    last = span.buckets - 1
    if span.name == "hour":
        return [(last - minutes, f"−{minutes} min" if minutes else "now") for minutes in (59, 45, 30, 15, 0)]
    per_hour = 3600 // span.size
    return [(last - hours * per_hour, f"−{hours} h" if hours else "now") for hours in (23, 18, 12, 6, 0)]


def _peak(values: Sequence[float | None], trend: Trend) -> str:
    present = [(v, i) for i, v in enumerate(values) if v is not None]
    if not present or max(present)[0] == 0:
        return ""
    value, index = max(present)
    return f", peaking at {number(value)} a minute {_ago(trend, index)}"


def _ago(trend: Trend, index: int) -> str:
    buckets_ago = trend.span.buckets - 1 - index
    if not buckets_ago:
        return "in the current bucket"
    minutes = buckets_ago * trend.span.size // 60
    return f"{minutes} min ago" if minutes < 120 else f"{minutes // 60} h ago"


def trend_charts(trend: Trend, *, label: str) -> list[Chart]:
    """The four charts of one span: Events, attempts, route latency and backlog."""
    starts = trend.span.starts
    x_labels = _x_labels(trend)
    per = (
        "per minute"
        if trend.span.size == 60
        else f"per minute, averaged over {counted(trend.span.size // 60, 'minutes')}"
    )
    events = [
        ("accepted", "series-accepted", trend.per_minute(trend.accepted)),
        ("routed", "series-routed", trend.per_minute(trend.routed)),
        ("unmatched", "series-unmatched", trend.per_minute(trend.unmatched)),
        ("dead-lettered", "series-dead", trend.per_minute(trend.dead_lettered)),
    ]
    attempts = [
        ("started", "series-accepted", trend.per_minute(trend.attempts_started)),
        ("completed", "series-routed", trend.per_minute(trend.attempts_completed)),
        ("failed", "series-dead", trend.per_minute(trend.attempts_failed)),
    ]
    p50 = [v for v in trend.latency_p50 if v is not None]
    p99 = [v for v in trend.latency_p99 if v is not None]
    pending = trend.latency_pending
    note = (
        f"The {pending} oldest bucket{'s are' if pending != 1 else ' is'} not ranked yet: each page "
        "ranks a bounded number of Events, newest first, and keeps what it ranked."
        if pending
        else ""
    )
    latency_summary = (
        f"Route latency, acceptance to route decision, {label}: median per bucket from "
        f"{seconds(min(p50))} to {seconds(max(p50))}; p99 at most {seconds(max(p99))}."
        if p50
        else f"Route latency {label}: no routed Event ranked."
    ) + (f" {note}" if note else "")
    return [
        line_chart(
            id=f"chart-events-{trend.span.name}",
            title=f"Events {per}, {label}",
            summary=(
                f"Events {label}: {sum(trend.accepted):,} accepted{_peak(events[0][2], trend)}; "
                f"{sum(trend.routed):,} routed, {sum(trend.unmatched):,} unmatched, "
                f"{sum(trend.dead_lettered):,} dead-lettered."
            ),
            unit="Events per minute",
            starts=starts,
            series=events,
            x_labels=x_labels,
        ),
        line_chart(
            id=f"chart-attempts-{trend.span.name}",
            title=f"Attempts {per}, {label}",
            summary=(
                f"Attempts {label}: {sum(trend.attempts_started):,} started, "
                f"{sum(trend.attempts_completed):,} completed, {sum(trend.attempts_failed):,} failed or lost."
            ),
            unit="attempts per minute",
            starts=starts,
            series=attempts,
            x_labels=x_labels,
        ),
        line_chart(
            id=f"chart-latency-{trend.span.name}",
            title=f"Route latency (acceptance to route decision), {label}",
            summary=latency_summary,
            unit="seconds",
            starts=starts,
            series=[
                ("p50", "series-routed", trend.latency_p50),
                ("p99", "series-dead", trend.latency_p99),
            ],
            x_labels=x_labels,
            fmt=seconds,
            note=note,
        ),
        line_chart(
            id=f"chart-backlog-{trend.span.name}",
            title=f"Backlog (unrouted Events), {label}",
            summary=(f"Backlog {label}: {trend.backlog[-1]:,} unrouted now, at most {max(trend.backlog):,}."),
            unit="unrouted Events",
            starts=starts,
            series=[("unrouted", "series-unmatched", trend.backlog)],
            x_labels=x_labels,
        ),
    ]


TABLE_COLUMNS = (
    "accepted",
    "routed",
    "unmatched",
    "dead-lettered",
    "attempts started",
    "attempts completed",
    "attempts failed",
    "route latency p50",
    "route latency p99",
    "backlog",
)


def trend_table(trend: Trend, *, caption: str) -> SafeString:
    """The span's figures, a row a bucket: the counts per bucket (not per minute), the route
    latency percentiles and the backlog at the bucket's end. Built here rather than in a
    template loop: 132 rows of 11 cells would cost the page more than all its queries."""
    rows = (
        (
            timetag(start),
            *(
                number(value)
                for value in (
                    trend.accepted[n],
                    trend.routed[n],
                    trend.unmatched[n],
                    trend.dead_lettered[n],
                    trend.attempts_started[n],
                    trend.attempts_completed[n],
                    trend.attempts_failed[n],
                )
            ),
            seconds(trend.latency_p50[n]),
            seconds(trend.latency_p99[n]),
            number(trend.backlog[n]),
        )
        for n, start in enumerate(trend.span.starts)
    )
    body = format_html_join(
        "",
        '<tr><th scope="row">{}</th>' + "<td>{}</td>" * len(TABLE_COLUMNS) + "</tr>",
        rows,
    )
    head = format_html_join("", '<th scope="col">{}</th>', ((name,) for name in TABLE_COLUMNS))
    return format_html(
        # A table ignores a width or height below its content's: the wrapper hides it.
        '<div class="visually-hidden"><table id="trends-{}-table"><caption>{}</caption>'
        '<thead><tr><th scope="col">bucket from</th>{}</tr></thead><tbody>{}</tbody></table></div>',
        trend.span.name,
        caption,
        head,
        body,
    )

"""Filter and paging forms of the console's lists. Bad input names its field."""

from __future__ import annotations

from typing import Any

from django import forms

from causal.models import RouteState
from infra.converters import MAX_ID
from infra.times import parse_time
from routing.records.filters import QUERY_MAX_LENGTH, EventListFilter, EventListInvalid
from worklife.models import WorkStatus
from worklife.selectors import AWAITING_BINDING, BACKING_OFF, FLOW_HELD, PARKED, PAUSED, WorkFilter


def _choices_with_any(choices: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [("", "any"), *choices]


class CursorField(forms.IntegerField):
    """A keyset cursor: a positive integer taken from a "next page" link."""

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("min_value", 1)
        # A larger number is refused (400) rather than overflowing the database driver (500).
        kwargs.setdefault("max_value", MAX_ID)
        kwargs.setdefault("widget", forms.HiddenInput)
        super().__init__(**kwargs)


class TimeField(forms.CharField):
    """A moment: an ISO 8601 date or time (UTC without an offset), a time ago (-2h) or
    today/yesterday, read by the CLI's and the API's parser."""

    def to_python(self, value):
        text = super().to_python(value)
        if not text:
            return None
        try:
            return parse_time(text)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None


class KeysetOrderForm(forms.Form):
    """Paging of a list that reads newest first (``before`` a key) or oldest first
    (``oldest``, ``after`` a key). Subclasses call :meth:`clean_order` first in ``clean``."""

    before = CursorField(help_text="Newest first: show rows with a lower key than this one.")
    after = CursorField(help_text="Oldest first: show rows with a higher key than this one.")
    oldest = forms.BooleanField(required=False, widget=forms.HiddenInput, help_text="Oldest first.")

    def clean_order(self, data: dict[str, Any]) -> bool:
        """Whether the filters can be read: no field error, and ``before`` not mixed with an
        oldest-first page (its error names it)."""
        if self.errors:
            return False
        if data.get("before") is not None and (data.get("oldest") or data.get("after") is not None):
            self.add_error("before", "pages a newest-first list: use after with oldest")
            return False
        return True

    def oldest_first(self) -> bool:
        """Whether the list reads oldest first (call after ``is_valid()``)."""
        return bool(self.cleaned_data["oldest"] or self.cleaned_data["after"] is not None)

    def cursor(self) -> int | None:
        """Where the page starts in its listing order (call after ``is_valid()``)."""
        return self.cleaned_data["after"] if self.oldest_first() else self.cleaned_data["before"]


# The filter's field each console parameter sets, where the names differ (errors name the
# parameter the page sent).
EVENT_PARAMS = {"query": "q", "state": "route_state"}


class EventFilterForm(KeysetOrderForm):
    """Filters of the Events list, as ``events list`` takes them: a search (envelope id,
    subject or seq), a scope and optionally its subtree, a type glob, the route state, the
    policy, an acceptance time range. ``before`` pages a newest-first list, ``after`` an
    oldest-first one (``oldest``)."""

    q = forms.CharField(
        required=False,
        max_length=QUERY_MAX_LENGTH,
        label="Find",
        help_text="The start of an Event's envelope id or subject, or its seq (#123).",
    )
    data = forms.CharField(
        required=False,
        max_length=QUERY_MAX_LENGTH,
        label="Data contains",
        help_text="Text in the Event's data (its JSON), among the newest 10,000 Events.",
    )
    scope = forms.CharField(required=False, max_length=255, help_text="A scope path, e.g. acme/web.")
    subtree = forms.BooleanField(required=False, label="and under it", help_text="Also every scope under it.")
    type = forms.CharField(
        required=False,
        max_length=255,
        help_text="An Event type or a glob: github.* ('*' any characters, '?' one).",
    )
    route_state = forms.ChoiceField(
        required=False,
        choices=_choices_with_any(RouteState.choices),
        label="Route state",
        help_text="Where the Event stands in routing.",
    )
    policy = forms.CharField(
        required=False, max_length=32, help_text="The policy its route recorded: unmatched, drop, queue…"
    )
    since = TimeField(
        required=False,
        label="Since (UTC)",
        help_text="Accepted at or after this time: 2026-01-05T12:00, -10m, -2h, -3d, today, yesterday.",
    )
    until = TimeField(
        required=False,
        label="Until (UTC)",
        help_text="Accepted before this time: 2026-01-05T12:00, -10m, -2h, -3d, today, yesterday.",
    )

    def clean(self):
        data = super().clean()
        if not self.clean_order(data):
            return data
        oldest = self.oldest_first()
        try:
            self.list_filter = EventListFilter(
                query=data["q"],
                scope=data["scope"],
                subtree=data["subtree"],
                type=data["type"],
                state=data["route_state"],
                policy=data["policy"],
                data=data["data"],
                since=data["since"],
                until=data["until"],
                after=self.cursor(),
                oldest=oldest,
            )
        except EventListInvalid as exc:
            self.add_error(EVENT_PARAMS.get(exc.field, exc.field), exc.message)
        return data

    def filters(self) -> EventListFilter:
        """The validated filters with their cursor (call after ``is_valid()``)."""
        return self.list_filter


class WorkFilterForm(KeysetOrderForm):
    """Filters of the Work list, as ``work list`` takes them: exact scope, status (or parked),
    binding and an owned correlation key. ``before`` pages a newest-first list, ``after`` an
    oldest-first one (``oldest``)."""

    scope = forms.CharField(required=False, max_length=255, help_text="Exact scope path, e.g. acme/web.")
    status = forms.ChoiceField(
        required=False,
        choices=_choices_with_any(
            [
                *WorkStatus.choices,
                (PARKED, "parked"),
                (BACKING_OFF, "backing off"),
                (AWAITING_BINDING, "waiting for a binding"),
                (FLOW_HELD, "held by flow control"),
                (PAUSED, "paused"),
            ]
        ),
        help_text=(
            "The Work's state; ready means none of: parked (after too many failures), backing"
            " off (its next try is later), waiting for a binding that can run it, held by flow"
            " control, paused (a pause of its scope or binding)."
        ),
    )
    binding = forms.CharField(required=False, max_length=128, help_text="The binding the Work runs on.")
    key = forms.CharField(
        required=False, max_length=512, help_text="A correlation key the Work owns, or its start."
    )

    def clean(self):
        data = super().clean()
        if not self.clean_order(data):
            return data
        try:
            self.work_filter = WorkFilter(
                scope=data["scope"], status=data["status"], binding=data["binding"], key=data["key"]
            )
        except ValueError as exc:
            field, _, message = str(exc).partition(": ")
            self.add_error(field if field in self.fields else None, message)
        return data

    def filters(self) -> WorkFilter:
        """The validated filters (call after ``is_valid()``)."""
        return self.work_filter


# The Work page's input list: in acceptance order (the default) or newest first.
INPUT_NEWEST = "newest"


class WorkDetailForm(forms.Form):
    """Paging of the Work page's lists: the input in acceptance order (``input_after``) or
    newest first (``input_order=newest``, ``input_before``), the history newest first."""

    input_order = forms.ChoiceField(
        required=False,
        choices=[("", "acceptance order"), (INPUT_NEWEST, "newest first")],
        help_text="The order of the input list.",
    )
    input_after = CursorField(help_text="Acceptance order: show input accepted after this Event seq.")
    input_before = CursorField(help_text="Newest first: show input accepted before this Event seq.")
    history_before = CursorField(help_text="Show route records of Events before this seq.")

    def clean(self):
        data = super().clean()
        newest = data.get("input_order") == INPUT_NEWEST
        if newest and data.get("input_after") is not None:
            self.add_error(
                "input_after", "pages the input in acceptance order: use input_before when newest first"
            )
        elif not newest and data.get("input_before") is not None:
            self.add_error("input_before", "pages the input newest first: add input_order=newest")
        return data

    def cursors(self) -> dict[str, Any]:
        """Where each list of the page starts, and the input's order (after ``is_valid()``)."""
        return {
            name: self.cleaned_data[name]
            for name in ("input_order", "input_after", "input_before", "history_before")
        }


class ConfigListForm(KeysetOrderForm):
    """Paging of the generations list (newest or oldest first) and the generation whose
    document is shown."""

    generation = CursorField(help_text="Show the document of generation N (default: the live one).")
    candidate = CursorField(help_text="Show the document of candidate N.")

    def clean(self):
        data = super().clean()
        self.clean_order(data)
        if data.get("generation") and data.get("candidate"):
            raise forms.ValidationError("show a generation or a candidate, not both")
        return data


def form_errors_text(form: forms.Form) -> str:
    """All of a form's errors on one line, each naming its field."""
    parts = []
    for field, errors in form.errors.items():
        for error in errors:
            parts.append(f"{field}: {error}" if field != "__all__" else str(error))
    return "; ".join(parts)

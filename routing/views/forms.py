"""Filter and paging forms of the console's lists. Bad input names its field."""

from __future__ import annotations

from django import forms

from causal.models import RouteState
from causal.selectors import EventFilter
from routing.converters import MAX_ID
from worklife.models import WorkStatus
from worklife.selectors import PARKED, WorkFilter


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


class EventFilterForm(forms.Form):
    """Filters of the Events list: exact scope, exact type, route state; ``before`` pages."""

    scope = forms.CharField(required=False, max_length=255, help_text="Exact scope path, e.g. acme/web.")
    type = forms.CharField(required=False, max_length=255, help_text="Exact Event type.")
    route_state = forms.ChoiceField(
        required=False,
        choices=_choices_with_any(RouteState.choices),
        label="Route state",
        help_text="Where the Event stands in routing.",
    )
    before = CursorField(help_text="Show Events with a lower seq than this one.")

    def filters(self) -> EventFilter:
        """The validated filters (call after ``is_valid()``)."""
        data = self.cleaned_data
        return EventFilter(scope=data["scope"], type=data["type"], route_state=data["route_state"])


class WorkFilterForm(forms.Form):
    """Filters of the Work list: exact scope and status (or parked); ``before`` pages."""

    scope = forms.CharField(required=False, max_length=255, help_text="Exact scope path, e.g. acme/web.")
    status = forms.ChoiceField(
        required=False,
        choices=_choices_with_any([*WorkStatus.choices, (PARKED, "parked")]),
        help_text="The Work's status; parked: ready Work parked after too many failures.",
    )
    before = CursorField(help_text="Show Work with a lower id than this one.")

    def filters(self) -> WorkFilter:
        """The validated filters (call after ``is_valid()``)."""
        return WorkFilter(scope=self.cleaned_data["scope"], status=self.cleaned_data["status"])


class WorkDetailForm(forms.Form):
    """Paging of the Work page's lists."""

    input_after = CursorField(help_text="Show input accepted after this Event seq.")
    history_before = CursorField(help_text="Show route records of Events before this seq.")


class ConfigListForm(forms.Form):
    """Paging of the generations list and the generation whose document is shown."""

    before = CursorField(help_text="Show generations with a lower id than this one.")
    generation = CursorField(help_text="Show the document of this generation (default: the live one).")


def form_errors_text(form: forms.Form) -> str:
    """All of a form's errors on one line, each naming its field."""
    parts = []
    for field, errors in form.errors.items():
        for error in errors:
            parts.append(f"{field}: {error}" if field != "__all__" else str(error))
    return "; ".join(parts)

"""Forms of the operator pages: every action needs a reason; a replay may be forced."""

from __future__ import annotations

from typing import Any

from django import forms
from django.forms.fields import InvalidJSONInput
from django.utils.translation import gettext_lazy as _

__all__ = ["PayloadField", "ReasonForm", "ReplayForm"]

#: Shortest reason accepted; "ok" or "x" says nothing to the next person reading the trail.
MIN_REASON = 3


class ReasonForm(forms.Form):
    """A mandatory reason, kept in the audit row (resolve, purge)."""

    reason = forms.CharField(
        label=_("Reason"),
        min_length=MIN_REASON,
        max_length=2000,
        strip=True,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 70}),
        help_text=_("Why this is safe now. It is kept in the audit trail with your name."),
    )


class ReplayForm(ReasonForm):
    """A replay's confirmation: the reason, and ``force`` to pass a changed chart.

    ``force`` is left out for a task's record (``for_task=True``): a task replay always runs
    the task's current chart from its start, so there is nothing for it to override.
    """

    def __init__(self, *args: Any, for_task: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if for_task:
            del self.fields["force"]

    force = forms.BooleanField(
        label=_("Force"),
        required=False,
        help_text=_("Replay even though the chart changed since the dead letter was captured."),
    )


class PayloadField(forms.JSONField):
    """A JSON field that answers a form error, never a server error, for any nesting depth.

    ``json.loads`` recurses once per nested level, so a pasted document a few thousand
    levels deep raises ``RecursionError`` inside Django's own ``JSONField`` (a 500 page).
    Here it is "too deeply nested"; the form's ``clean_`` method applies the real bound.
    """

    def to_python(self, value: Any) -> Any:
        try:
            return super().to_python(value)
        except RecursionError:
            raise forms.ValidationError(
                _("The JSON is nested too deeply; flatten it."), code="invalid"
            ) from None

    def bound_data(self, data: Any, initial: Any) -> Any:
        try:
            return super().bound_data(data, initial)
        except RecursionError:
            return InvalidJSONInput(data)

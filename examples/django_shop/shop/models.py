"""The shop's one model: an order to charge."""

from __future__ import annotations

from django.db import models


class Order(models.Model):
    """An order waiting for (or done with) its payment."""

    class Status(models.TextChoices):
        PENDING = "pending"
        PAID = "paid"

    amount_cents = models.PositiveIntegerField(help_text="What to charge, in cents.")
    status = models.CharField(
        max_length=16,
        choices=Status.choices,
        default=Status.PENDING,
        help_text="Whether the payment went through.",
    )
    created = models.DateTimeField(auto_now_add=True, help_text="When it was placed.")

    def __str__(self) -> str:
        return f"order {self.pk} ({self.status})"

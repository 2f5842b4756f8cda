"""Orders in the admin, beside the dead letters."""

from __future__ import annotations

from django.contrib import admin

from shop.models import Order


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    """Orders with their payment status."""

    list_display = ("id", "amount_cents", "status", "created")
    list_filter = ("status",)

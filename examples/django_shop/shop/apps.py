"""Application configuration of the shop example."""

from __future__ import annotations

from django.apps import AppConfig


class ShopConfig(AppConfig):
    """Orders and their payment task."""

    name = "shop"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Declare the order workflow in every process (web, worker, Beat)."""
        from shop import workflows  # noqa: F401

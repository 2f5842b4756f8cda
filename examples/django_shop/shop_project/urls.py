"""URLs of the shop example: the admin is the whole user interface."""

from __future__ import annotations

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]

"""The admin's chart drawing; the drawing itself lives in :mod:`xsm_celery.charttools.svg`.

It moved there so the command line (``xsm diagram --format svg``) draws the same picture
without Django.
"""

from __future__ import annotations

from xsm_celery.charttools.svg import render_chart_svg

__all__ = ["render_chart_svg"]

"""Run the demo: ``python -m xsm_celery.demo``."""

from __future__ import annotations

import sys

from xsm_celery.demo.runner import main

sys.exit(main())

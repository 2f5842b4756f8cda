"""The ``xsm-celery`` command line (``pip install 'xsm-celery[cli]'``).

``main()`` is the console script. Without click and rich it still runs, to say what to
install, instead of failing with an import traceback.
"""

from __future__ import annotations

import sys
import typing

__all__ = ["main"]

#: The modules the command line needs, all from the ``cli`` extra.
_CLI_MODULES = frozenset({"click", "rich"})

try:
    from xsm_celery.cli.group import main
except ImportError as exc:
    if exc.name not in _CLI_MODULES:
        raise
    _missing = exc.name

    def main() -> typing.NoReturn:  # type: ignore[misc]
        """Say which extra to install, and exit 1."""
        print(
            f"xsm-celery needs {_missing!r}, which is not installed; run: "
            "pip install 'xsm-celery[cli]'",
            file=sys.stderr,
        )
        raise SystemExit(1)

"""Which dead-letter store and which Celery app a ``dlq`` command works on.

The same commands run as ``xsm-celery dlq`` and as ``celery -A proj xsm dlq``. The store is
``--dlq URL`` when given, else the app's ``xsm_dead_letter_store`` setting; the app is
``--app module:attr`` when given, else the one ``celery -A`` loaded. Both are resolved only
when a command needs them, so ``--help`` never opens a database or imports a project.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from xsm_celery.cli.base import CliError
from xsm_celery.eda.opening import open_dead_letters
from xsm_celery.errors import XsmError
from xsm_celery.persistence.opening import scheme_of

__all__ = ["DlqTarget"]


@dataclass
class DlqTarget:
    """The ``--dlq`` / ``--app`` choices of one invocation, resolved lazily."""

    dlq_url: str | None = None
    app_spec: str | None = None
    #: The app ``celery -A`` loaded, when running as a Celery sub-command.
    celery_app: Any = None
    _store: Any = field(default=None, repr=False)
    _app: Any = field(default=None, repr=False)

    def app(self, *, needed_for: str) -> Any:
        """The Celery app, or a one-line error saying how to name one."""
        if self._app is None:
            if self.app_spec:
                self._app = _load_app(self.app_spec)
            elif self.celery_app is not None:
                self._app = self.celery_app
            else:
                raise CliError(
                    f"{needed_for} needs a Celery app: pass --app module:app "
                    "(or run it as: celery -A proj xsm dlq ...)"
                )
        return self._app

    def store(self) -> Any:
        """Open the existing store; a missing file or table is refused, never created."""
        if self._store is None:
            source = self._store_source()
            setting = "--dlq" if self.dlq_url else "xsm_dead_letter_store"
            try:
                self._store = _open(source, setting)
            except XsmError as exc:
                raise CliError(str(exc)) from None
        return self._store

    def close(self) -> None:
        """Release the store's connections, if one was opened."""
        close = getattr(self._store, "close", None)
        if callable(close):
            close()

    def _store_source(self) -> Any:
        if self.dlq_url:
            return self.dlq_url
        if self.app_spec or self.celery_app is not None:
            app = self.app(needed_for="finding the dead-letter store")
            return _configured_store(app)
        raise CliError(
            "no dead-letter store: pass --dlq URL (sqlite:///dlq.db, postgresql://...) or "
            "--app module:app to use its xsm_dead_letter_store setting"
        )


def _open(source: Any, setting: str) -> Any:
    """The store a setting value names, exactly as a worker resolves it.

    ``"django"`` is the Django app's table (Django is set up first, as ``manage.py`` would);
    a ``memory://`` store lives in the memory of the process that wrote it, so it is refused.
    A file or table that does not exist is refused too: a reader never creates one.
    """
    scheme = scheme_of(source) if isinstance(source, str) else ""
    if scheme == "memory":
        raise CliError(
            f"--dlq {source}: a memory store lives inside the process that wrote it and "
            "cannot be read from another one; point the worker and this command at a "
            "database (sqlite:///..., postgresql://... or 'django')"
        )
    if scheme == "django":
        _setup_django()
    return open_dead_letters(source, setting=setting, existing_only=True)


def _setup_django() -> None:
    """Run ``django.setup()`` when settings are configured but the apps are not loaded yet."""
    try:
        import django
        from django.apps import apps
    except ImportError:
        message = "'django' names the Django stores: pip install 'xsm-celery[django]'"
        raise CliError(message) from None
    if not apps.ready:
        try:
            django.setup()
        except Exception as exc:  # ImproperlyConfigured and the project's own import errors
            raise CliError(
                f"cannot set up Django for the 'django' store ({type(exc).__name__}: {exc}); "
                "set DJANGO_SETTINGS_MODULE"
            ) from None


def _load_app(spec: str) -> Any:
    """Import ``module:attr`` (or ``module``, as ``celery -A`` does) as a Celery app."""
    try:
        from celery.app.utils import find_app
    except ImportError:
        raise CliError("--app needs Celery: pip install 'xsm-celery[celery]'") from None
    try:
        return find_app(spec)
    except Exception as exc:  # any import-time error of the user's project
        raise CliError(f"cannot load Celery app {spec!r}: {type(exc).__name__}: {exc}") from None


def _configured_store(app: Any) -> Any:
    """The app's ``xsm_dead_letter_store`` setting, validated like a worker validates it."""
    try:
        from xsm_celery.celery.settings import read_settings
    except ImportError as exc:
        raise CliError(f"cannot read the app's xsm_ settings: {exc}") from None
    try:
        return read_settings(app).dead_letter_store
    except XsmError as exc:
        raise CliError(str(exc)) from None

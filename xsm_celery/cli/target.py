"""Which Celery app and which stores a command works on.

The same commands run as ``xsm-celery dlq`` and as ``celery -A proj xsm dlq``. The store is
``--dlq URL`` when given, else the app's ``xsm_dead_letter_store`` setting; the app is
``--app module:attr`` when given, else the one ``celery -A`` loaded. Both are resolved only
when a command needs them, so ``--help`` never opens a database or imports a project.

An app that belongs to a Django project (``DJANGO_SETTINGS_MODULE`` is set, or Celery's
Django fix-up is installed on it) gets ``django.setup()`` as soon as it is loaded, as a
worker of that project does, so its ``"django"`` stores open in every command.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any

import click

from xsm_celery.cli.base import CliError
from xsm_celery.eda.opening import open_dead_letters
from xsm_celery.errors import XsmError
from xsm_celery.persistence.opening import StoreKind, open_store, scheme_of

__all__ = ["DlqTarget", "command_app", "cwd_on_path", "load_app", "open_existing"]


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
                self._app = load_app(self.app_spec)
            elif self.celery_app is not None:
                self._app = setup_django_for(self.celery_app)
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
    """The dead-letter store a setting value names, exactly as a worker resolves it."""
    _check_readable(source, setting)
    return open_dead_letters(source, setting=setting, existing_only=True)


def open_existing(source: Any, kind: StoreKind, setting: str) -> Any:
    """The store of ``kind`` that ``source`` (``--timers URL``, a setting) names, to read it.

    Raises:
        CliError: a memory store, Django that cannot be set up, or a store that cannot be
            opened; the message names ``setting``.
    """
    _check_readable(source, setting)
    try:
        if kind == "dead_letters":
            return open_dead_letters(source, setting=setting, existing_only=True)
        return open_store(source, kind, setting=setting, existing_only=True)
    except (XsmError, ValueError) as exc:
        raise CliError(str(exc)) from None


def _check_readable(source: Any, setting: str) -> None:
    """Refuse a memory store; set Django up for a ``"django"`` one.

    ``"django"`` is the Django app's table (Django is set up first, as ``manage.py`` would);
    a ``memory://`` store lives in the memory of the process that wrote it, so it is refused.
    A file or table that does not exist is refused by the opener: a reader never creates one.
    """
    scheme = scheme_of(source) if isinstance(source, str) else ""
    if scheme == "memory":
        raise CliError(
            f"{setting} {source}: a memory store lives inside the process that wrote it and "
            "cannot be read from another one; point the worker and this command at a "
            "database (sqlite:///..., postgresql://... or 'django')"
        )
    if scheme == "django":
        try:
            import django  # noqa: F401
        except ImportError:
            message = "'django' names the Django stores: pip install 'xsm-celery[django]'"
            raise CliError(message) from None
        _setup_django(f"the {setting} 'django' store")


def _setup_django(needed_for: str) -> None:
    """Run ``django.setup()`` when settings are configured but the apps are not loaded yet."""
    import django
    from django.apps import apps

    if not apps.ready:
        cwd_on_path()  # DJANGO_SETTINGS_MODULE=proj.settings, imported as manage.py does
        try:
            django.setup()
        except Exception as exc:  # ImproperlyConfigured and the project's own import errors
            raise CliError(
                f"cannot set up Django for {needed_for} ({type(exc).__name__}: {exc}); "
                "set DJANGO_SETTINGS_MODULE to the project's settings module"
            ) from None


def command_app(ctx: click.Context, app_spec: str | None) -> Any:
    """``--app`` when given, else the app ``celery -A`` loaded, else None; Django set up."""
    if app_spec:
        return load_app(app_spec)
    root = ctx.find_root().obj
    app = getattr(root, "app", None) if root is not None else None
    return None if app is None else setup_django_for(app)


def load_app(spec: str) -> Any:
    """Import ``module:attr`` (or ``module``) as ``celery -A`` does: from the current directory.

    The app of a Django project comes back with Django set up (see ``setup_django_for``).
    """
    try:
        from celery.app.utils import find_app
    except ImportError:
        raise CliError("--app needs Celery: pip install 'xsm-celery[celery]'") from None
    try:
        cwd_on_path()
        app = find_app(spec)
    except Exception as exc:  # any import-time error of the user's project
        raise CliError(f"cannot load Celery app {spec!r}: {type(exc).__name__}: {exc}") from None
    return setup_django_for(app)


def setup_django_for(app: Any) -> Any:
    """Run ``django.setup()`` for an app of a Django project, as its worker would; ``app``.

    A Django project is recognised the way Celery recognises one: ``DJANGO_SETTINGS_MODULE``
    is set (the project's ``celery.py`` usually sets it), Celery's Django fix-up is installed
    on the app, or Django's settings were configured in code.
    """
    try:
        from django.conf import settings
    except ImportError:  # as Celery's fix-up: no Django, nothing to set up
        return app
    fixups = getattr(app, "_fixups", None) or ()
    uses_django = (
        bool(os.environ.get("DJANGO_SETTINGS_MODULE"))
        or any(type(fixup).__name__ == "DjangoFixup" for fixup in fixups)
        or settings.configured
    )
    if uses_django:
        _setup_django(f"the Django project of Celery app {getattr(app, 'main', None)!r}")
    return app


def cwd_on_path() -> None:
    """Put the current directory first on ``sys.path``, as ``celery -A`` does.

    It stays there: a project's modules import each other (and Celery imports task
    modules) after the first import, from the same directory.
    """
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


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

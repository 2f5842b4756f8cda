"""Exit codes and one-line errors shared by every ``xsm-celery`` command.

Operators pipe ``--json`` output into other tools, so nothing but the result may reach
stdout, and an error must be one line on stderr that a log or a script can quote. Click's
own usage errors print the usage block first; the command classes here turn them into
the same one-line form, whether the command runs as ``xsm-celery`` or inside ``celery``.
"""

from __future__ import annotations

from typing import IO, Any

import click

__all__ = [
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_REPLAY_FAILED",
    "CliError",
    "OneLineCommand",
    "OneLineGroup",
    "command_name",
]

#: Success.
EXIT_OK = 0

#: A real replay ran and its outcome was not a success (the record stays unresolved).
EXIT_REPLAY_FAILED = 1

#: Refused input: a missing store file, an unsupported URL, an unknown id, a bad age or
#: limit, a missing guard-rail flag (``--yes``, ``--reason``) or a refused replay.
EXIT_REFUSED = 2


def command_name(ctx: click.Context | None = None) -> str | None:
    """The xsm command ``ctx`` runs in (``dlq``, ``status``), or None outside of one.

    That is the name right under the outermost xsm group: ``xsm-celery dlq show`` and
    ``celery -A proj xsm dlq show`` are both ``dlq``, so an error line reads the same under
    the console script and under Celery.
    """
    chain: list[click.Context] = []
    current = ctx or click.get_current_context(silent=True)
    while current is not None:
        chain.insert(0, current)
        current = current.parent
    for depth, context in enumerate(chain[:-1]):
        if isinstance(context.command, OneLineGroup):
            return chain[depth + 1].info_name
    return None


class CliError(click.ClickException):
    """Refused input: one line on stderr, exit status 2.

    The line starts with ``xsm <command>: error:``, the command it was raised in (``xsm:
    error:`` outside of any), unless a command's own error class sets ``prefix``.
    """

    exit_code = EXIT_REFUSED
    prefix: str | None = None

    def __init__(self, message: str) -> None:
        super().__init__(message)
        if self.prefix is None:
            name = command_name()
            self.prefix = f"xsm {name}: error:" if name else "xsm: error:"

    def show(self, file: IO[Any] | None = None) -> None:
        """Print ``<prefix> <message>`` on one line of stderr."""
        message = " ".join(self.format_message().split())
        click.echo(f"{self.prefix} {message}", err=True, file=file)


def _one_line(exc: click.UsageError, command: click.Command | None = None) -> CliError:
    error_class = getattr(command, "error_class", CliError)
    error: CliError = error_class(exc.format_message())
    return error


class _OneLineUsage(click.Command):
    """Parse as click does, but report a usage error as a one-line ``CliError``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Parse as click does, but report a usage error on one line."""
        try:
            return super().parse_args(ctx, args)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as exc:
            raise _one_line(exc, self) from None


class OneLineCommand(_OneLineUsage):
    """A command whose usage errors are one-line ``CliError``s."""


class OneLineGroup(_OneLineUsage, click.Group):
    """A group whose usage errors (bad option, unknown sub-command) are one line."""

    command_class = OneLineCommand

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """Find the sub-command; an unknown one is a one-line error."""
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as exc:
            raise _one_line(exc) from None


OneLineGroup.group_class = OneLineGroup

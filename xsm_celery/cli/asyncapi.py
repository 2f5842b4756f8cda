"""``xsm-celery asyncapi CHART``: the AsyncAPI 3.0.0 document of a chart, optionally validated.

``--workflow NAME`` (with ``--app``, or inside ``celery -A proj xsm``) documents a declared
workflow instead: the Celery task message its worker accepts on its queue (see
``xsm_celery.celery.workflow.asyncapi``); the chart document stays the dispatcher's.

The document goes to stdout (or to ``-o FILE``, written atomically, so a failed run never
leaves half a file behind). Like every command here, a refusal is one line on stderr:
exit 2 for input that cannot work (an unloadable chart, an unwritable file, an empty
option, ``--validate`` without jsonschema), exit 1 when ``--validate`` finds the document
invalid, in which case no file is written.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import click

from xsm_celery.cli.base import EXIT_REPLAY_FAILED, CliError, OneLineCommand
from xsm_celery.cli.dispatcher import load_machine
from xsm_celery.cli.target import command_app
from xsm_celery.errors import MissingExtraError, XsmError

__all__ = ["EXIT_INVALID", "AsyncApiError", "asyncapi"]

#: ``--validate`` found the generated document invalid (nothing was written).
EXIT_INVALID = EXIT_REPLAY_FAILED


class AsyncApiError(CliError):
    """Refused ``asyncapi`` input: ``xsm asyncapi: error: <message>``, exit status 2."""

    prefix = "xsm asyncapi: error:"


class _InvalidDocument(AsyncApiError):
    exit_code = EXIT_INVALID


class _AsyncApiCommand(OneLineCommand):
    error_class = AsyncApiError


def _non_empty(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not value.strip():
        raise AsyncApiError(f"--{param.name and param.name.replace('_', '-')} must not be empty")
    return value


def _server(host: str | None, protocol: str | None) -> dict[str, str] | None:
    if host is None and protocol is None:
        return None
    if host is None:
        raise AsyncApiError("--protocol needs --server HOST (e.g. --server localhost:9092)")
    if protocol is None:
        raise AsyncApiError(
            "--server needs --protocol (e.g. --protocol kafka, amqp, redis, nats, sqs)"
        )
    return {"host": host, "protocol": protocol}


def _validate(document: dict[str, Any]) -> None:
    from xsm_celery.eda.asyncapi import validate_asyncapi

    try:
        validate_asyncapi(document)
    except MissingExtraError as exc:
        raise AsyncApiError(
            f'--validate needs jsonschema: pip install "xsm-celery[asyncapi]" ({exc})'
        ) from None
    except Exception as exc:
        path = getattr(exc, "json_path", None)
        message = getattr(exc, "message", None)
        if path is None or message is None:
            raise
        raise _InvalidDocument(f"document is not valid AsyncAPI 3.0: {path}: {message}") from None


def _write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder."""
    folder = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=folder)
    except OSError as exc:
        raise AsyncApiError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise AsyncApiError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None


def _workflow_document(
    ctx: click.Context,
    app_spec: str | None,
    name: str,
    server: dict[str, str] | None,
    **options: Any,
) -> dict[str, Any]:
    """The document of workflow ``name`` of the app, after the app imported its modules."""
    app = command_app(ctx, app_spec)
    if app is None:
        raise AsyncApiError(
            f"--workflow {name} needs a Celery app: pass --app module:app "
            "(or run it as: celery -A proj xsm asyncapi --workflow NAME)"
        )
    from xsm_celery.celery.workflow.api import workflow_named

    try:
        app.loader.import_default_modules()  # the task modules declare the workflows
        workflow = workflow_named(app, name)
        return workflow.asyncapi(server, **options)
    except XsmError as exc:
        raise AsyncApiError(str(exc)) from None


def _chart_document(chart: str, server: dict[str, str] | None, **options: Any) -> dict[str, Any]:
    from xsm_celery.eda.asyncapi import asyncapi_document

    try:
        machine = load_machine(chart, None)
    except CliError as exc:
        raise AsyncApiError(exc.format_message()) from None
    try:
        return asyncapi_document(machine, server, **options)
    except ValueError as exc:
        raise AsyncApiError(f"cannot load machine {chart!r}: {exc}") from None


@click.command("asyncapi", cls=_AsyncApiCommand)
@click.argument("chart", type=click.Path(dir_okay=False), required=False)
@click.option(
    "--workflow",
    "workflow_name",
    default=None,
    callback=_non_empty,
    help="Document this workflow of the app (its Celery task message) instead of a CHART.",
)
@click.option("--app", "app_spec", metavar="MODULE:APP", help="Celery app of --workflow.")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the document here instead of stdout.",
)
@click.option(
    "--server",
    default=None,
    callback=_non_empty,
    help="Broker host[:port] for the servers block, e.g. localhost:9092.",
)
@click.option(
    "--protocol",
    default=None,
    callback=_non_empty,
    help="Broker protocol: kafka, amqp, redis, nats, sqs ...",
)
@click.option(
    "--inbound-topic",
    default=None,
    callback=_non_empty,
    help="Where consumed events arrive (topic or Celery queue); default the chart id.",
)
@click.option(
    "--outbound-topic",
    default=None,
    callback=_non_empty,
    help="The topic the outbox publishes to (default: events, or the workflow's outbox_topic).",
)
@click.option(
    "--validate",
    is_flag=True,
    help="Check the document against the AsyncAPI 3.0.0 JSON Schema (needs jsonschema).",
)
@click.pass_context
def asyncapi(
    ctx: click.Context,
    *,
    chart: str | None,
    workflow_name: str | None,
    app_spec: str | None,
    output: str | None,
    server: str | None,
    protocol: str | None,
    inbound_topic: str | None,
    outbound_topic: str | None,
    validate: bool,
) -> None:
    """Generate the AsyncAPI 3.0.0 document of CHART (a chart JSON file) or of --workflow."""
    server_object = _server(server, protocol)
    if (chart is None) == (workflow_name is None):
        raise AsyncApiError("give a CHART file or --workflow NAME (one of them)")
    if workflow_name is not None:
        if inbound_topic is not None:
            raise AsyncApiError("--inbound-topic is the workflow's queue; set queue= on it")
        options = {} if outbound_topic is None else {"outbound_topic": outbound_topic}
        document = _workflow_document(ctx, app_spec, workflow_name, server_object, **options)
    else:
        assert chart is not None
        document = _chart_document(
            chart,
            server_object,
            inbound_topic=inbound_topic,
            outbound_topic=outbound_topic or "events",
        )
    if validate:
        _validate(document)
    text = json.dumps(document, indent=2, sort_keys=False) + "\n"
    if output is None:
        click.echo(text, nl=False)
        return
    _write(Path(output), text)
    inbound = document["channels"].get("inbound") or document["channels"]["steps"]
    consumed = len(inbound["messages"])
    published = len(document["channels"]["outbound"]["messages"])
    checked = ", valid" if validate else ""
    click.echo(f"wrote {output}: {consumed} consumed, {published} published events{checked}")

"""The package's layers: the core runs on the standard library, and imports point down.

These tests hold the layout DESIGN.md draws ("Layout": dependency direction):

* Importing the core with every third-party package blocked succeeds (a subprocess), and
  the core's source imports a third-party package only inside the function that needs it,
  listed in ``OPTIONAL_IN_CORE`` with its extra.
* An import-rule table over the source (the AST) of every module: which folder may import
  which. ``engine`` imports only the standard library and the stdlib-only top-level modules;
  ``patterns``, ``persistence`` and ``eda`` import ``engine`` (``eda`` also ``persistence``
  and ``patterns``, for the reasons in ``RULES``); an integration folder imports the core and
  never another integration, except the entries of ``EXCEPTIONS``, each with its reason.
  Imports inside functions count, and so do imports under ``if TYPE_CHECKING:``: a type
  from a higher layer ties a module to that layer as much as a call does.
* No import cycles: the module graph of the code that runs has no strongly connected
  component but those in ``ALLOWED_CYCLES``. Imports inside functions count (moving an
  import into a function hides a cycle, it does not remove it); imports under
  ``if TYPE_CHECKING:`` do not, because they never run. A picture of the imports read as
  text shows those too, so a second test counts them, and the one type-only cycle that stays
  (the engine's phase modules annotating ``runtime.Core``) is in ``ALLOWED_TYPE_CYCLES``.

A failure names the file and line, what it imports, and how to fix it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.import_graph import PACKAGE, Import, ImportGraph, strongly_connected

THIRD_PARTY = ("celery", "kombu", "django", "sqlalchemy", "redis", "click", "rich", "psycopg")
CORE = ("xsm_celery", "xsm_celery.errors", "xsm_celery.hooks")

ROOT = Path(__file__).resolve().parent.parent


def _import_with_blocked(modules: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    code = textwrap.dedent(
        f"""
        import importlib, sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {THIRD_PARTY!r}:
                    raise ImportError("blocked third-party import: " + name)
                return None
        sys.meta_path.insert(0, Block())
        for name in {modules!r}:
            importlib.import_module(name)
        """
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)


def core_modules() -> tuple[str, ...]:
    """The core packages that exist so far, so the test grows with the package."""
    import importlib.util

    names = list(CORE)
    for sub in ("engine", "patterns", "persistence", "eda", "plugins", "charttools", "actions"):
        name = f"xsm_celery.{sub}"
        if importlib.util.find_spec(name) is not None:
            names.append(name)
    return tuple(names)


def test_core_imports_without_third_party_packages() -> None:
    """Importing the core with every third-party package blocked succeeds."""
    result = _import_with_blocked(core_modules())
    assert result.returncode == 0, result.stderr


def test_blocking_really_blocks() -> None:
    """The blocker itself works: importing an integration package fails under it."""
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "class B:\n"
            "    def find_spec(self, n, p=None, t=None):\n"
            "        if n.split('.')[0] == 'kombu': raise ImportError(n)\n"
            "sys.meta_path.insert(0, B())\n"
            "import kombu\n",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0


@pytest.mark.parametrize("name", ["XsmError", "XStateMachineError"])
def test_error_base_is_exported(name: str) -> None:
    """Both names of the error base import from the top level and are one class."""
    import xsm_celery

    assert getattr(xsm_celery, name) is xsm_celery.errors.XsmError


@dataclass(frozen=True)
class Allowed:
    """``importer`` may import ``imported``, for ``reason``.

    ``importer`` is a path below ``xsm_celery/``: a folder (``"eda/"``) or one file
    (``"patterns/__init__.py"``). ``imported`` is a dotted name below ``xsm_celery``, which
    covers its submodules too (``"redis"``, ``"eda.choreography"``); ``"__init__"`` is the
    top-level package itself.
    """

    importer: str
    imported: str
    reason: str

    def covers(self, edge: Import) -> bool:
        """Whether this entry allows ``edge``."""
        path = _rel_path(edge)
        if self.importer.endswith("/"):
            if not path.startswith(self.importer):
                return False
        elif path != self.importer:
            return False
        target = _rel_name(edge.imported)
        return target == self.imported or target.startswith(self.imported + ".")


#: Top-level modules that import only the standard library (and ``errors``): any folder,
#: the engine included, may use them.
FOUNDATION = ("errors", "checks", "hooks", "ids", "operators", "process")
#: Top-level modules that give engine names the import paths the seeds use.
SEED_PATHS = ("__init__.py", "actions.py", "plugins.py")
CORE_FOLDERS = ("engine", "charttools", "patterns", "persistence", "eda", "contrib")
INTEGRATIONS = ("kombu", "celery", "sqlalchemy", "django", "redis", "metrics", "cli")


def _each(importer: str, imported: Iterable[str], reason: str) -> tuple[Allowed, ...]:
    return tuple(Allowed(importer, name, reason) for name in imported)


#: The layers. Imports inside one folder are always allowed.
RULES: tuple[Allowed, ...] = (
    *_each("checks.py", ["errors"], "a refused value is a ConfigurationError"),
    *_each("hooks.py", ["errors"], "an unknown fact kind is a ConfigurationError"),
    *_each("ids.py", ["errors"], "a bad id setting is a ConfigurationError"),
    *_each("operators.py", ["errors"], "a bad operator name is a ConfigurationError"),
    *_each("engine/", FOUNDATION, "the engine needs nothing but the standard library"),
    *_each("charttools/", ["engine", *FOUNDATION], "chart tools read validated machines"),
    *_each("patterns/", ["engine", *FOUNDATION], "patterns are charts and plain code"),
    *_each("persistence/", ["engine", *FOUNDATION], "stores keep engine snapshots"),
    *_each("eda/", ["engine", *FOUNDATION], "the dispatcher drives machines"),
    Allowed(
        "eda/",
        "persistence",
        "the dispatcher loads and saves instances with persisted() and deduplicates on an "
        "Inbox; outbox rows share the snapshot's transaction and the claim lease of timers",
    ),
    Allowed(
        "eda/",
        "patterns",
        "chart dead letters (DeadLetterPlugin) and dispatcher dead letters are one record in "
        "one store, with one error chain; seed 003 names DeadLetterPlugin in xsm_celery.eda",
    ),
    *(
        Allowed(path, name, "seed paths: the engine's names where the seeds import them")
        for path in SEED_PATHS
        for name in ("engine", "errors")
    ),
    *_each(
        "contrib/",
        ["engine", "eda", *FOUNDATION],
        "seed 003 names contrib.cloudevents and contrib.testing: thin shims over the core",
    ),
    *(
        Allowed(f"{folder}/", name, "integrations build on the core")
        for folder in INTEGRATIONS
        for name in (*CORE_FOLDERS, *FOUNDATION, "__init__")
    ),
    *_each(
        "demo/",
        [*CORE_FOLDERS, *FOUNDATION, *INTEGRATIONS, "__init__"],
        "the demo is an application of the package: it may use everything, nothing uses it",
    ),
    *_each(
        "testing.py",
        ["engine", "celery", *FOUNDATION],
        "xsm_celery.testing turns the engine's graph paths into tests that replay them "
        "through a workflow's own entry points (send_now, step)",
    ),
)

#: Imports across the layers that the code needs, each with its reason. An entry no import
#: uses any more fails the test, so the table shrinks with the code.
EXCEPTIONS: tuple[Allowed, ...] = (
    Allowed(
        "patterns/__init__.py",
        "eda.choreography",
        "seed 003 imports ChoreographyRouter from xsm_celery.patterns; the router is an "
        "InboundDispatcher over routes, so it lives in eda and is resolved on first use",
    ),
    # The store seam: a URL's scheme names the module that opens it.
    *(
        Allowed(
            "persistence/opening.py",
            module,
            "open_store() imports, by name and on the first URL with its scheme, the module "
            "that registers a built-in scheme (one seam, integrations register with it)",
        )
        for module in ("sqlalchemy.opening", "redis.opening", "django.stores.opening")
    ),
    Allowed(
        "persistence/opening.py",
        "eda.opening",
        "memory:// dead letters: their store belongs to the layers above, which register it "
        "when open_store() first needs it",
    ),
    # celery: the broker, the fleet's Redis, exporters.
    Allowed(
        "celery/worker/relay.py",
        "kombu",
        "celery may use kombu (DESIGN): the Beat relay publishes over the app's broker "
        "connection with KombuBrokerAdapter",
    ),
    Allowed(
        "celery/worker/consumer.py",
        "kombu",
        "celery may use kombu (DESIGN): the consumer step reads event topics with the kombu "
        "adapter over the worker's own broker connection",
    ),
    Allowed(
        "celery/fleet/plan.py",
        "redis",
        "fleet-wide limits, breakers and admission records live in the fleet Redis "
        "(xsm_redis_url); imported when a task declares one",
    ),
    Allowed(
        "celery/fleet/reading.py",
        "redis",
        "a status and a scrape read the fleet's breakers and limiters from the fleet Redis",
    ),
    Allowed(
        "celery/fleet/admission.py",
        "redis",
        "a fleet concurrency limit holds its slot in Redis while the task runs",
    ),
    Allowed(
        "celery/__init__.py",
        "metrics.worker",
        "importing xsm_celery.celery connects the worker signals that start the exporters "
        "its xsm_metrics_* / tracing settings ask for, handing them sources_for_app; "
        "metrics imports nothing of celery",
    ),
    Allowed(
        "celery/worker/status.py",
        "metrics",
        "a worker answers a status query with metrics.figures rows, the shape every status "
        "view reads",
    ),
    # cli: the command reaches each integration behind the option that names it.
    Allowed(
        "cli/breakers.py",
        "celery",
        "--app: the fleet settings exactly as the worker reads them, and its limit key labels",
    ),
    Allowed("cli/breakers.py", "redis", "fleet breakers and limits are kept in Redis"),
    Allowed(
        "cli/asyncapi.py",
        "celery",
        "--workflow: the AsyncAPI document of a workflow declared on the app",
    ),
    Allowed("cli/dispatcher.py", "sqlalchemy", "--store URL opens the SQLAlchemy stores"),
    Allowed(
        "cli/status.py",
        "celery",
        "--app: the app's stores and running workers, as the worker's status reply sees them",
    ),
    Allowed(
        "cli/status.py",
        "metrics",
        "the same figures as the admin status page and /metrics (metrics.figures)",
    ),
    Allowed(
        "cli/exporter.py",
        "metrics",
        "xsm-celery metrics serves the exporters' collectors (queues, workers, store figures)",
    ),
    Allowed(
        "cli/exporter.py",
        "celery",
        "--app: the app's stores, read as the worker's status reply reads them",
    ),
    Allowed(
        "cli/target.py",
        "celery",
        "--app: the app's xsm_dead_letter_store read and validated as the worker reads it",
    ),
    # django: the admin's pages over the Celery app and the fleet, two commands.
    Allowed(
        "django/admin/fleet.py",
        "celery",
        "the fleet page reads the Celery app's fleet settings",
    ),
    Allowed("django/admin/fleet.py", "redis", "the fleet page reads and resets the fleet Redis"),
    Allowed(
        "django/admin/instances.py",
        "celery",
        "the instances page checks, dry-runs and sends workflow events with the workflow API",
    ),
    Allowed("django/admin/status.py", "celery", "the status page asks the running workers"),
    Allowed(
        "django/charts.py",
        "celery",
        "the dead-letter and instance pages draw a declared workflow's chart (find_workflow)",
    ),
    Allowed("django/admin/status.py", "metrics", "the status page shows metrics.figures"),
    Allowed(
        "django/management/commands/xsm_relay.py",
        "kombu",
        "the relay command publishes with KombuBrokerAdapter unless a broker factory is set",
    ),
    Allowed(
        "django/management/commands/xsm_timers.py",
        "celery",
        "due timers fire through the Celery app's timer task",
    ),
    Allowed(
        "django/operations.py",
        "celery",
        "replaying a task-step dead letter re-runs it with celery's replay_task",
    ),
)

#: Import cycles that stay, as the set of modules of each strongly connected component.
ALLOWED_CYCLES: dict[frozenset[str], str] = {}

#: Cycles closed only by imports under ``if TYPE_CHECKING:`` (they never run), with the reason.
ALLOWED_TYPE_CYCLES: dict[frozenset[str], str] = {
    frozenset(
        f"{PACKAGE}.engine.{name}"
        for name in (
            "build",
            "builtins",
            "children",
            "delivery",
            "effects",
            "invoke",
            "machine",
            "mermaid",
            "plugins",
            "runtime",
            "selection",
            "services",
            "snapshot",
            "snapshot_v011",
            "state",
            "timers",
        )
    ): (
        "the interpreter's run loop (runtime.Core) calls one module per phase (selection, "
        "delivery, effects, invoke, timers ...), and each phase annotates its argument as "
        "Core or Machine; the calls all point down from runtime, only the annotations point "
        "back. A Protocol in their place would copy about forty of Core's fields."
    ),
}


def _rel_path(edge: Import) -> str:
    return edge.path.relative_to(ROOT / PACKAGE).as_posix()


def _rel_name(module: str) -> str:
    return "__init__" if module == PACKAGE else module.removeprefix(PACKAGE + ".")


def _folder_of_path(path: str) -> str:
    return path.split("/", 1)[0] + "/" if "/" in path else path


def _same_folder(edge: Import) -> bool:
    path = _rel_path(edge)
    return "/" in path and path.split("/", 1)[0] == _rel_name(edge.imported).split(".", 1)[0]


@pytest.fixture(scope="module")
def graph() -> ImportGraph:
    """The import graph of the package as the source reads now."""
    return ImportGraph(ROOT)


def test_the_graph_sees_the_package(graph: ImportGraph) -> None:
    """The graph is not vacuous: it holds the engine and the imports of machine.py."""
    assert "xsm_celery.engine.machine" in graph.modules
    assert any(e.importer == "xsm_celery.engine.machine" for e in graph.imports)
    assert len(graph.imports) > 500


def _violation(edge: Import) -> str:
    path = _rel_path(edge)
    folder = _folder_of_path(path)
    allowed = sorted({r.imported for r in RULES if r.importer in (folder, path)})
    return (
        f"  {edge.where(ROOT)}\n"
        f"      {folder} may import: {', '.join(allowed) or 'only the standard library'}\n"
        f'      or list it: Allowed("{path}", "{_rel_name(edge.imported)}", "<why>"),'
    )


_FIX = (
    "Fix: move what the importer needs down into its own layer (a shared type or constant "
    "goes to the lower module), pass a callable or a value in, or let the other side import "
    "this one; an import moved into a function still counts. If the dependency is genuinely "
    "needed, add the suggested entry to EXCEPTIONS in tests/test_layering.py with its reason."
)


def test_every_import_follows_the_layers(graph: ImportGraph) -> None:
    """Each import stays in its folder, follows RULES, or is a listed exception."""
    table = RULES + EXCEPTIONS
    broken = {
        _violation(edge)
        for edge in graph.imports
        if not _same_folder(edge) and not any(rule.covers(edge) for rule in table)
    }
    assert not broken, "imports against the layers:\n" + "\n".join(sorted(broken)) + "\n" + _FIX


def test_every_exception_is_still_used(graph: ImportGraph) -> None:
    """An exception no import needs any more is removed from the table."""
    stale = [e for e in EXCEPTIONS if not any(e.covers(edge) for edge in graph.imports)]
    assert not stale, "remove these EXCEPTIONS, nothing imports that way now: " + repr(stale)


def test_every_exception_has_a_reason() -> None:
    """An exception without a reason is a hole, not a decision."""
    assert all(len(rule.reason) > 20 for rule in RULES + EXCEPTIONS)
    assert all(len(reason) > 20 for reason in ALLOWED_CYCLES.values())
    assert all(len(reason) > 20 for reason in ALLOWED_TYPE_CYCLES.values())


def _describe_cycle(graph: ImportGraph, members: frozenset[str], *, typed: bool = False) -> str:
    edges = [
        f"    {edge.where(ROOT)}"
        for edge in graph.imports
        if (typed or not edge.type_only) and edge.importer in members and edge.imported in members
    ]
    return (
        f"import cycle among {', '.join(sorted(members))}:\n"
        + "\n".join(sorted(set(edges)))
        + "\n    Fix: move the shared piece into a module both import, pass a callable or a "
        "value in, or merge the modules; an import moved into a function still counts. A "
        "cycle that must stay goes into ALLOWED_CYCLES (ALLOWED_TYPE_CYCLES when only "
        "TYPE_CHECKING imports close it) with its reason; a type-only edge can often be a "
        "Protocol of what the module uses."
    )


def test_no_import_cycles(graph: ImportGraph) -> None:
    """The modules' runtime imports form no cycle but the listed ones."""
    found = strongly_connected(graph.runtime_edges())
    new = [_describe_cycle(graph, c) for c in found if c not in ALLOWED_CYCLES]
    assert not new, "\n\n".join(new)
    gone = [sorted(c) for c in ALLOWED_CYCLES if c not in found]
    assert not gone, f"remove these ALLOWED_CYCLES, they are no cycle now: {gone}"


def test_no_cycles_through_type_annotations(graph: ImportGraph) -> None:
    """Counting ``TYPE_CHECKING`` imports too, only the listed type-only cycles remain."""
    runtime = strongly_connected(graph.runtime_edges())
    found = [c for c in strongly_connected(graph.typed_edges()) if c not in runtime]
    new = [_describe_cycle(graph, c, typed=True) for c in found if c not in ALLOWED_TYPE_CYCLES]
    assert not new, "\n\n".join(new)
    gone = [sorted(c) for c in ALLOWED_TYPE_CYCLES if c not in found]
    assert not gone, f"remove these ALLOWED_TYPE_CYCLES, they are no cycle now: {gone}"


#: Third-party packages the core imports, each only inside the function that needs it (so
#: importing the core needs none of them): ``(file, package) -> reason``.
OPTIONAL_IN_CORE: dict[tuple[str, str], str] = {
    ("engine/context_model.py", "pydantic"): "create_machine(context_model=): the pydantic extra",
    ("contrib/cloudevents.py", "cloudevents"): "SDK objects: the cloudevents extra",
    ("eda/asyncapi.py", "jsonschema"): "validate_asyncapi(): the asyncapi extra",
    ("eda/asyncapi.py", "referencing"): "validate_asyncapi() resolves $refs: the asyncapi extra",
}

#: Where the core lives: the folders and top-level modules that must run on the stdlib.
CORE_PATHS = (
    *(f"{folder}/" for folder in CORE_FOLDERS),
    *(f"{name}.py" for name in FOUNDATION),
    *SEED_PATHS,
)


def test_the_core_imports_extras_only_inside_functions(graph: ImportGraph) -> None:
    """A third-party import in the core is listed and sits inside the function using it."""
    broken = []
    for edge in graph.external:
        path = _rel_path(edge)
        if not any(path == p or (p.endswith("/") and path.startswith(p)) for p in CORE_PATHS):
            continue
        listed = (path, edge.imported) in OPTIONAL_IN_CORE
        if not listed or not (edge.in_function or edge.type_only):
            broken.append(
                f"{edge.where(ROOT)}: the core imports third-party packages only inside the "
                "function that needs them, listed in OPTIONAL_IN_CORE with the extra it needs"
            )
    assert not broken, "\n".join(broken)

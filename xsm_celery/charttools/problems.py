"""Every problem of a chart, each with its path (``xsm validate``).

``create_machine`` stops at the first problem, which is right for code but slow for a person
fixing a chart. Here each refusal is recorded, the offending entry is cut out of a copy of
the chart, and the chart is built again, until it builds (bounded), so one run lists them
all. With logic given, every name it lacks is listed too.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from xsm_celery.engine.logic import MachineLogic
from xsm_celery.engine.machine import create_machine
from xsm_celery.errors import ChartError, ImplementationMissingError

__all__ = ["MAX_PROBLEMS", "Problem", "find_problems"]

#: Problems listed before giving up (a chart this broken is better fixed in rounds).
MAX_PROBLEMS = 100

_INDEX = re.compile(r"^(.*)\[(\d+)\]$")


@dataclass(frozen=True)
class Problem:
    """One problem: where (``states.a.on.GO``), what kind, and the message."""

    path: str
    kind: str
    message: str


def find_problems(
    chart: Mapping[str, Any], *, strict: bool = False, logic: MachineLogic | None = None
) -> list[Problem]:
    """Every problem ``create_machine(chart, logic, strict_config=strict)`` would raise."""
    work: dict[str, Any] = copy.deepcopy(dict(chart))
    found: list[Problem] = []
    while len(found) < MAX_PROBLEMS:
        try:
            machine = create_machine(work, logic=logic, strict_config=strict)
        except ImplementationMissingError as exc:
            found.extend(_missing(exc.missing))
            return found
        except ChartError as exc:
            path = str(getattr(exc, "path", "") or "")
            found.append(Problem(path, type(exc).__name__, str(exc)))
            if not path or not _cut(work, path):
                return found
            continue
        if logic is not None:
            found.extend(_missing(machine.missing))
        return found
    return found


def _missing(missing: tuple[tuple[str, str, str], ...]) -> list[Problem]:
    return [
        Problem(path, f"missing {kind}", f"unknown {kind} {name!r}") for kind, name, path in missing
    ]


def _cut(chart: MutableMapping[str, Any], path: str) -> bool:
    """Delete the entry a problem path names; whether something was removed."""
    parent, key = _locate(chart, path)
    if parent is None:
        return False
    if isinstance(parent, list) and isinstance(key, int) and key < len(parent):
        del parent[key]
        return True
    if isinstance(parent, MutableMapping) and key in parent:
        del parent[key]
        return True
    return False


def _locate(node: Any, path: str) -> tuple[Any, Any]:
    """The container holding the entry at ``path`` and its key (keys may contain dots)."""
    segments = path.split(".")
    current = node
    parent: Any = None
    key: Any = None
    index = 0
    while index < len(segments):
        if not isinstance(current, Mapping):
            return None, None
        for end in range(len(segments), index, -1):
            candidate = ".".join(segments[index:end])
            match = _INDEX.match(candidate)
            name, position = (match.group(1), int(match.group(2))) if match else (candidate, None)
            if name.strip('"') == "" and "" in current:
                name = ""
            if name in current:
                parent, key = current, name
                current = current[name]
                if position is not None:
                    if not isinstance(current, list) or position >= len(current):
                        return None, None
                    parent, key = current, position
                    current = current[position]
                index = end
                break
        else:
            return None, None
    return parent, key

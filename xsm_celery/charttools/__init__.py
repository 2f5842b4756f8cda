"""Chart tools that need no code of the chart's: draw, summarise, document and validate.

Standard library only, so the command line (``xsm inspect|diagram|docs|validate|simulate``)
and the Django admin share them: :mod:`.layout` and :mod:`.svg` draw the admin's SVG,
:mod:`.summary` counts what a chart holds, :mod:`.docs` writes a Markdown page,
:mod:`.problems` lists every problem with its path, and :mod:`.simulate` steps a chart
through events with stub logic. :func:`to_mermaid` (Mermaid ``stateDiagram-v2`` text) is
re-exported from the engine, which owns it because ``Machine.to_mermaid()`` needs it.
"""

from __future__ import annotations

from xsm_celery.engine.mermaid import to_mermaid

__all__ = ["to_mermaid"]

"""Chart tools that need no code of the chart's: draw, summarise, document and validate.

Standard library only, so the command line (``xsm inspect|diagram|docs|validate|simulate``)
and the Django admin share them: :mod:`.layout` and :mod:`.svg` draw the admin's SVG,
:mod:`.mermaid` writes Mermaid ``stateDiagram-v2`` text, :mod:`.summary` counts what a chart
holds, :mod:`.docs` writes a Markdown page, :mod:`.problems` lists every problem with its
path, and :mod:`.simulate` steps a chart through events with stub logic.
"""

from __future__ import annotations

from xsm_celery.charttools.mermaid import to_mermaid

__all__ = ["to_mermaid"]

"""The MetaServer and the config service (``configcenter/``) of ykafka.

In a checkout this package imports as ``metaserver`` and the pipeline as ``pipeline``; the ``ykafka-server``
wheel installs them as ``ykafka_metaserver`` and ``ykafka_pipeline`` (docs/architecture.md, "Distributions").
Modules here import each other relatively, and the pipeline through :func:`pipeline_module`.
"""

from __future__ import annotations

import importlib
from types import ModuleType


def pipeline_module(name: str) -> ModuleType:
    """The pipeline's module ``name`` (e.g. ``"aggregates"``) under the name it has beside this package."""
    return importlib.import_module(f"{__name__.replace('metaserver', 'pipeline')}.{name}")

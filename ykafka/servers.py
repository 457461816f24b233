"""Where the server packages are: the ``ykafka-server`` distribution, or a checkout of the repository.

The servers' code lives in the repository's ``metaserver/`` and ``pipeline/`` folders and is installed by the
``ykafka-server`` wheel as ``ykafka_metaserver`` and ``ykafka_pipeline``, names no application uses
(docs/architecture.md, "Distributions"). ``ykafka dev up`` and the ``ykafka`` command find them here under
either name; the folder names count only when they are the checkout's own, beside this ``ykafka/``, so an
application's package called ``pipeline`` is never taken for ours.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Literal

ServerPackage = Literal["metaserver", "pipeline"]
_CHECKOUT = Path(__file__).resolve().parent.parent


def server_package(name: ServerPackage) -> str | None:
    """The import name of a server package (``ykafka_metaserver`` installed, ``metaserver`` in a checkout),
    or None when neither is there."""
    if importlib.util.find_spec(f"ykafka_{name}") is not None:
        return f"ykafka_{name}"
    spec = importlib.util.find_spec(name)
    if spec is not None and spec.origin and Path(spec.origin).resolve().parent.parent == _CHECKOUT:
        return name
    return None


def install_hint(extra: str | None = None) -> str:
    """The pip command that installs the servers (with ``extra``: pipeline, postgres, devstack)."""
    return f"pip install 'ykafka-server[{extra}]'" if extra else "pip install ykafka-server"


def require_server_package(name: ServerPackage, what: str, extra: str | None = None) -> str:
    """As :func:`server_package`, or an ImportError saying what to install."""
    found = server_package(name)
    if found is None:
        raise ImportError(f"{what} needs the ykafka servers, which are not installed: {install_hint(extra)}")
    return found

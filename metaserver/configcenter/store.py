"""The config center's store: SQLite storage plus every write operation, as one object.

`storage.StoreBase` holds the engine, transactions, snapshots and lookups; `config_writes` the edits of
apps, namespaces, items and credentials; `release_writes` releases, gray branches and rollbacks.
"""

from __future__ import annotations

from .config_writes import ConfigWrites
from .release_writes import ReleaseWrites
from .storage import Change, unique_key

__all__ = ["Change", "Store", "unique_key"]


class Store(ConfigWrites, ReleaseWrites):
    """The database of one config center (see the module docstrings for the parts)."""

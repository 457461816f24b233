"""The ``ykafka`` console script: the command itself (``ykafka/cli.py``) needs the ``cli`` extra.

A client-only install (``pip install ykafka``) has no click, rich or PyYAML; there ``ykafka --version`` still
answers and any other command says in one line what to install, instead of an ImportError traceback.
"""

from __future__ import annotations

import sys

CLI_EXTRA_HINT = "pip install 'ykafka[cli]'"


def main() -> None:
    from ykafka import __version__

    try:
        from ykafka.cli import main as cli
    except ModuleNotFoundError as exc:
        if exc.name not in ("click", "rich", "yaml"):
            raise
        if sys.argv[1:] == ["--version"]:
            sys.stdout.write(f"ykafka, version {__version__}\n")  # what click's version option prints
            return
        sys.stderr.write(f"error: the ykafka command needs {exc.name}, which is not installed. "
                         f"Fix: {CLI_EXTRA_HINT}\n")
        raise SystemExit(2) from None
    cli()

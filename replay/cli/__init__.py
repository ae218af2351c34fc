"""The ``deltalog`` command line (the only part of the project that prints)."""

from replay.cli.main import main

__all__ = ["main"]

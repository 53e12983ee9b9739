"""The ``pitcrew`` command line: the top layer, which may import every other."""

from pitcrew.cli.main import main

__all__ = ["main"]

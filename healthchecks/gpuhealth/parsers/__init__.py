"""Parsers for the output of real tools: nccl-tests, ``dcgmi diag -j``, kernel logs.

Every parser refuses what it cannot read with :class:`ParseError`, which names
the line (or JSON path) at fault; none ever guesses a number.
"""

from gpuhealth.parsers.errors import ParseError

__all__ = ["ParseError"]

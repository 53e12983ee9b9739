"""Parsers for the output of real tools: nccl-tests, ``dcgmi diag -j``, kernel logs.

Every parser refuses what it cannot read with :class:`ParseError`, which names
the line (or JSON path) at fault; none ever guesses a number. The kernel-log
parser, whose lines are independent of each other, flags an unreadable
driver line instead and reads on, so one line never hides the others'
events. :mod:`~gpuhealth.parsers.nccl_verdict` judges a parsed nccl-tests run
against the floor of its topology.
"""

from gpuhealth.parsers.errors import ParseError

__all__ = ["ParseError"]

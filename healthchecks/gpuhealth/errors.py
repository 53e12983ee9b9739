"""The root of every error gpuhealth raises on purpose.

Command lines (``gpuhealth`` here, ``pitcrew`` in the operator) catch this one
type and print its message as it is, so a new error needs no new ``except``
clause and no traceback reaches a person for an error we understand. Each
subclass keeps its builtin base too (``ValueError``, ``RuntimeError``, ...), so
code that catches those still catches it. This module imports nothing from
gpuhealth, so any module of the package can import it without a cycle.
"""


class GpuhealthError(Exception):
    """An error gpuhealth understands; its message is meant for a person."""

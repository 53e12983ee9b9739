"""The root of every error Pitcrew raises on purpose.

Command lines catch :class:`PitcrewError` (and gpuhealth's ``GpuhealthError``)
and print the message as it is: each subclass's message says what failed and
what to do next, so no traceback reaches a user for an error we understand.
"""


class PitcrewError(Exception):
    """An error Pitcrew understands; its message is meant for a person."""

"""The errors ``pitcrew simulate`` raises on purpose.

The command line (``pitcrew.cli.main``) prints the message after ``pitcrew simulate:``
and exits 2 for a :class:`SimulationInputError` (bad flags or policy files, as
argparse does for a bad flag) and 1 for any other :class:`SimulationError`.
"""

from pitcrew.api.errors import PitcrewError


class SimulationError(PitcrewError):
    """The simulator could not do what it was asked."""


class SimulationInputError(SimulationError):
    """The flags or a policy file describe no simulation that can run: the message says
    which one and why."""


class ReportUnavailableError(SimulationError):
    """``--report`` cannot write its plots here (matplotlib is not installed)."""

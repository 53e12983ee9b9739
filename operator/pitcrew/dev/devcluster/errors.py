"""The one error type the devcluster launcher raises: its message is meant to be
printed as it is, naming the component that failed and the tail of its log."""

from pitcrew.api.errors import PitcrewError


class DevclusterError(PitcrewError, RuntimeError):
    """A devcluster could not be built, started or stopped."""

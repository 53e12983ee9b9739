"""What a training job imports: progress reporting for goodput accounting.

Free of the operator: it loads the ``kubernetes`` client and Pitcrew's API
models (pydantic), never kopf, the shell or the simulation, and it never
raises into a training loop.
"""

from pitcrew.client.background import BackgroundReporter
from pitcrew.client.progress import ProgressReporter

__all__ = ["BackgroundReporter", "ProgressReporter"]

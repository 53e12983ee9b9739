"""What a training job imports: progress reporting for goodput accounting.

Kept small and free of the operator: a training image needs only this folder,
the kubernetes client, and the annotation format in :mod:`pitcrew.core.job_ledger`.
"""

from pitcrew.client.progress import ProgressReporter

__all__ = ["ProgressReporter"]

"""The rows and lines that both outputs of ``pitcrew simulate`` print.

The terminal table (:mod:`.command`) and the Markdown report (:mod:`.report`)
state the stragglers' figures and the advice on the gap to the target in the same
words, so both read them from here rather than from each other.
"""

from __future__ import annotations

from pitcrew.simulate.compare import Comparison, gap
from pitcrew.simulate.run import Outcome

STRAGGLER_LABELS = (
    "stragglers",
    "hours at a straggler's pace",
    "goodput lost to the pace",
    "MFU lost",
    "effective goodput",
)
"""The stragglers' table: straggler faults that struck, the hours the job trained at a
straggler's pace, the points of goodput that pace cost, the share of the job's healthy
MFU it cost, and job goodput less those points. The badput counts time, and a slow
job's time is as busy as a healthy one's: the pace's cost is here."""


def percent(value: float) -> str:
    return f"{value * 100:.2f} %"


def straggler_cells(outcome: Outcome) -> tuple[str, ...]:
    slow = outcome.stragglers
    return (
        str(slow.faults),
        f"{slow.hours:.1f}",
        percent(slow.throughput_lost),
        percent(slow.mfu_lost),
        percent(outcome.effective_goodput),
    )


def gap_lines(comparison: Comparison) -> list[str]:
    """What closes the gap to the target, for the table and the report."""
    reference = comparison.reference
    found = gap(reference, comparison.target)
    if not found:
        return []
    short = (comparison.target - reference.job_goodput) * 100
    lines = [
        f"{reference.name} is {short:.2f} points under the {comparison.target * 100:g} % "
        "target; its badput, largest first:"
    ]
    lines += [f"- {category} {share * 100:.2f} %: {remedy}" for category, share, remedy in found]
    return lines

"""What the demo shows: a snapshot of the fleet, rendered with rich.

:class:`Snapshot` is plain data collected once a second by the runner;
:func:`render` turns it into the live screen and :func:`summary` into the
closing table, so the screen can be tested without a cluster. The closing table
ends with what Pitcrew adds to a stock cluster, which the demo cannot measure on
itself: the simulator's figure for a fleet of the demo's size
(:mod:`pitcrew.dev.demo.simulated`) and the one at Llama 3's size.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from pitcrew.api.gpunode import Phase
from pitcrew.dev.demo.scenario import HANG, STRAGGLER
from pitcrew.dev.demo.simulated import SimulatedGain

COLOURS = {
    Phase.HEALTHY: "green",
    Phase.SPARE: "cyan",
    Phase.PENDING: "grey50",
    Phase.VALIDATING: "blue",
    Phase.SUSPECT: "yellow",
    Phase.QUARANTINED: "orange1",
    Phase.DRAINING: "dark_orange",
    Phase.REMEDIATING: "magenta",
    Phase.MAINTENANCE: "purple",
    Phase.RETIRED: "red",
    Phase.EXCLUDED: "grey35",
}
LEGEND = {
    Phase.HEALTHY: "in service",
    Phase.SPARE: "validated, held for replacements",
    Phase.VALIDATING: "burn-in / checks before taking work",
    Phase.SUSPECT: "degraded: drained at the job's next checkpoint",
    Phase.QUARANTINED: "cordoned: no new work",
    Phase.DRAINING: "pods being evicted (PDB-aware)",
    Phase.REMEDIATING: "GPU reset / reboot / ticket in progress",
    Phase.MAINTENANCE: "drained for a maintenance window",
    Phase.RETIRED: "failed too often: needs an RMA",
}


@dataclass
class InjectedFault:
    at: float
    node: str
    category: str
    description: str
    cordoned_after: float | None = None
    """Seconds until Pitcrew took the node out of service (Suspect or worse)."""


@dataclass
class Snapshot:
    elapsed: float
    seed: int
    phases: dict[str, Phase]
    job_step: int = 0
    job_checkpoint: int = 0
    job_running: int = 0
    job_size: int = 0
    job_restarts: int = 0
    hang_restarted_after: float | None = None
    """Seconds from the hung job's last step to its pods restarted."""
    job_lost_steps: float = 0.0
    step_seconds: float = 0.0
    job_interruptions: int = 0
    """Interruptions in Pitcrew's ledger (its metrics), beside the job's own restarts."""
    job_wasted_seconds: float = 0.0
    job_seconds: dict[str, float] = field(default_factory=dict)
    """The job's wall time by category, from Pitcrew's metrics."""
    fleet_goodput: float | None = None
    job_goodput: float | None = None
    job_mfu: float | None = None
    mfu_samples: list[tuple[float, float]] = field(default_factory=list)
    """The job's MFU as the operator measured it, by elapsed second."""
    remediations: int = 0
    actions: list[str] = field(default_factory=list)
    faults: list[InjectedFault] = field(default_factory=list)
    metrics_url: str = ""
    kubeconfig: str = ""


@dataclass(frozen=True)
class StragglerStory:
    """The straggler's effect on the job, from the operator's own MFU gauge."""

    fault: InjectedFault
    before: float | None
    """Median MFU in the 30 s before the fault."""
    during: float | None
    """Median MFU from 10 s after the fault until the node was taken out."""
    after: float | None
    """Median MFU from 30 s after the node was taken out (the job resumed on a
    replacement) to the end."""


WATCHDOG_S = 600.0
"""PyTorch's default NCCL timeout: a hung job waits this long without Pitcrew."""
SETTLE_S = 10.0
RECOVER_S = 30.0


def straggler_story(snapshot: Snapshot) -> StragglerStory | None:
    fault = next((f for f in snapshot.faults if f.category == STRAGGLER), None)
    if fault is None:
        return None
    out = None if fault.cordoned_after is None else fault.at + fault.cordoned_after
    samples = snapshot.mfu_samples

    def median(start: float, end: float) -> float | None:
        found = sorted(m for t, m in samples if start <= t < end)
        return found[len(found) // 2] if found else None

    return StragglerStory(
        fault,
        before=median(fault.at - RECOVER_S, fault.at),
        during=median(fault.at + SETTLE_S, out if out is not None else snapshot.elapsed + 1),
        after=None if out is None else median(out + RECOVER_S, snapshot.elapsed + 1),
    )


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f} %"


def _grid(snapshot: Snapshot) -> RenderableType:
    cells = Text()
    for index, (_name, phase) in enumerate(sorted(snapshot.phases.items())):
        cells.append("■ ", style=COLOURS.get(phase, "white"))
        if index % 16 == 15:
            cells.append("\n")
    counts: dict[Phase, int] = {}
    for phase in snapshot.phases.values():
        counts[phase] = counts.get(phase, 0) + 1
    legend = Table.grid(padding=(0, 1))
    for phase, colour in COLOURS.items():
        if phase in counts or phase in LEGEND:
            legend.add_row(
                Text("■", style=colour),
                f"{phase}",
                str(counts.get(phase, 0)),
                Text(LEGEND.get(phase, ""), style="dim"),
            )
    return Panel(Group(cells, Text(""), legend), title=f"{len(snapshot.phases)} GPU nodes")


def _goodput(snapshot: Snapshot) -> RenderableType:
    table = Table.grid(padding=(0, 2))
    table.add_row(
        "Fleet goodput",
        _percent(snapshot.fleet_goodput),
        Text("GPU time on nodes in service", style="dim"),
    )
    table.add_row(
        "Job goodput",
        _percent(snapshot.job_goodput),
        Text("job time that produced kept progress", style="dim"),
    )
    table.add_row(
        "Job MFU",
        _percent(snapshot.job_mfu),
        Text("model FLOP/s / peak bf16 of its GPUs", style="dim"),
    )
    table.add_row(
        "Training job",
        f"step {snapshot.job_step} (checkpoint {snapshot.job_checkpoint})",
        f"{snapshot.job_running}/{snapshot.job_size} pods running, "
        f"{snapshot.job_restarts} restarts, {snapshot.job_lost_steps:.1f} steps lost",
    )
    table.add_row("Remediations", str(snapshot.remediations), "")
    return Panel(table, title="Goodput")


def _faults(snapshot: Snapshot) -> RenderableType:
    table = Table(expand=True, box=None)
    for column in ("t", "node", "fault", "taken out after"):
        table.add_column(column)
    for fault in snapshot.faults[-8:]:
        table.add_row(
            f"{fault.at:.0f}s",
            fault.node,
            f"{fault.category}: {fault.description}",
            "-" if fault.cordoned_after is None else f"{fault.cordoned_after:.1f}s",
        )
    return Panel(table, title=f"Faults injected ({len(snapshot.faults)})")


def render(snapshot: Snapshot) -> RenderableType:
    actions = Text("\n".join(snapshot.actions[-10:]) or "waiting for the first decision...")
    footer = Text(
        f"metrics: {snapshot.metrics_url}   kubectl: export KUBECONFIG={snapshot.kubeconfig}   "
        "Ctrl-C stops everything",
        style="dim",
    )
    return Group(
        Text(f"Pitcrew demo: t={snapshot.elapsed:.0f}s, seed {snapshot.seed}", style="bold"),
        _grid(snapshot),
        _goodput(snapshot),
        _faults(snapshot),
        Panel(actions, title="Pitcrew's last actions (Events)"),
        footer,
    )


def summary(snapshot: Snapshot, *, simulated: SimulatedGain | None = None) -> Table:
    detected = [f for f in snapshot.faults if f.cordoned_after is not None]
    node_faults = [f for f in snapshot.faults if f.node != "-"]
    delays = sorted(f.cordoned_after for f in detected if f.cordoned_after is not None)
    median = delays[len(delays) // 2] if delays else None
    table = Table(title=f"Pitcrew demo summary (seed {snapshot.seed}, {snapshot.elapsed:.0f}s)")
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_row("faults injected", str(len(snapshot.faults)))
    table.add_row(
        "  on nodes / job crashes",
        f"{len(node_faults)} / {len(snapshot.faults) - len(node_faults)}",
    )
    table.add_row("node faults that took the node out of service", str(len(detected)))
    table.add_row(
        "median time from fault to out of service", "-" if median is None else f"{median:.1f}s"
    )
    table.add_row("remediations started", str(snapshot.remediations))
    table.add_row(
        "job: restarts / steps lost",
        f"{snapshot.job_restarts} / {snapshot.job_lost_steps:.1f}",
    )
    ledger_steps = (
        snapshot.job_wasted_seconds / snapshot.step_seconds if snapshot.step_seconds else 0
    )
    table.add_row(
        "ledger: interruptions / wasted",
        f"{snapshot.job_interruptions} / {snapshot.job_wasted_seconds:.1f}s"
        f" = {ledger_steps:.1f} steps",
    )
    table.add_row("fleet goodput", _percent(snapshot.fleet_goodput))
    table.add_row("job goodput", _percent(snapshot.job_goodput))
    total = sum(snapshot.job_seconds.values())
    if total:
        for category in ("productive", "wasted", "recovery", "waiting"):
            share = snapshot.job_seconds.get(category, 0.0) / total
            table.add_row(f"  job time {category}", _percent(share))
    table.add_row("job MFU", _percent(snapshot.job_mfu))
    story = straggler_story(snapshot)
    if story is not None:
        fault = story.fault
        table.add_row(
            f"straggler ({fault.description}) on {fault.node} at {fault.at:.0f}s",
            "not taken out"
            if fault.cordoned_after is None
            else f"taken out after {fault.cordoned_after:.1f}s",
        )
        table.add_row(
            "  job MFU before / while it straggled / after",
            " / ".join(_percent(m) for m in (story.before, story.during, story.after)),
        )
    hang = next((f for f in snapshot.faults if f.category == HANG), None)
    if hang is not None:
        restarted = snapshot.hang_restarted_after
        table.add_row(
            f"hang ({hang.description}) on {hang.node} at {hang.at:.0f}s",
            "job not restarted" if restarted is None else f"job restarted after {restarted:.0f}s",
        )
        table.add_row(
            "  node out / NCCL watchdog's default",
            ("not taken out" if hang.cordoned_after is None else f"{hang.cordoned_after:.0f}s")
            + f" / {WATCHDOG_S:.0f}s",
        )
    if simulated is not None:
        _simulated_rows(table, simulated)
    return table


def _points(gain: float) -> str:
    return f"{gain * 100:+.2f} pts"


def _simulated_rows(table: Table, simulated: SimulatedGain) -> None:
    table.add_row(
        f"simulated (pitcrew simulate), Llama 3 mix, {simulated.days:g} days",
        f"this fleet: {simulated.job_nodes}-node job of {simulated.nodes}, "
        f"{simulated.spares} spares, seed {simulated.seed}",
    )
    table.add_row(
        "  job goodput: stock cluster / Pitcrew's defaults",
        f"{_percent(simulated.stock)} / {_percent(simulated.pitcrew)}",
    )
    table.add_row("  Pitcrew over a stock cluster", _points(simulated.gain))
    table.add_row(
        "  the same at Llama 3's size (2,048-node job)",
        "`pitcrew simulate`, figures in docs/benchmarks.md",
    )
    table.caption = (
        "stock cluster: the NVIDIA device plugin's health check and Kubernetes' "
        "NotReady eviction; people do the rest"
    )

"""Policies compared on one seed, what each of Pitcrew's levers adds, and advice.

Every contender meets the same faults (:func:`.mix.schedule` is seeded per node),
so differences between runs are the policies'. A lever's worth is measured by
taking it away from a policy and running again: the goodput lost is what the
lever adds. The levers are the ones Pitcrew owns:

- ``spares``: hot spares released when a node is quarantined (``spares.count`` 0);
- ``checkpointAwareDrain``: a Suspect node drains after its job's next checkpoint
  (without it: at once, ``safety.drain.checkpointMaxDelay`` 0);
- ``burnIn``: nodes back from repair or joining are burned in before they take
  work (``validation.burnInAfterRepair`` and ``burnInOnJoin`` off);
- ``detection``: the node agent's findings reach the operator at once (without
  it: only when a person would have noticed the crash).

Advice: the checkpoint interval by Young and Daly, ``sqrt(2·C·M) - C`` for a
checkpoint cost ``C`` and the job's measured mean time between failures ``M``
(J. T. Daly, "A higher order estimate of the optimum checkpoint interval for
restart dumps", 2006), and the job goodput for a range of spare counts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from pitcrew.api.meta import Duration
from pitcrew.api.policy import GPUHealthPolicySpec
from pitcrew.simulate.realism import Sweep, varied
from pitcrew.simulate.run import Outcome, run
from pitcrew.simulate.settings import (
    PEOPLE,
    STOCK,
    Assumptions,
    Contender,
    Settings,
    with_spares,
)
from pitcrew.simulate.timing import HOUR

WITHOUT_PITCREW = frozenset({PEOPLE, STOCK})


def _without_spares(spec: GPUHealthPolicySpec) -> GPUHealthPolicySpec:
    return with_spares(spec, 0)


def _without_checkpoint_wait(spec: GPUHealthPolicySpec) -> GPUHealthPolicySpec:
    drain = spec.safety.drain.model_copy(update={"checkpoint_max_delay": Duration("0s")})
    return spec.model_copy(update={"safety": spec.safety.model_copy(update={"drain": drain})})


def _without_burn_in(spec: GPUHealthPolicySpec) -> GPUHealthPolicySpec:
    validation = spec.validation.model_copy(
        update={"burn_in_on_join": False, "burn_in_after_repair": False}
    )
    return spec.model_copy(update={"validation": validation})


LEVERS: dict[str, Callable[[GPUHealthPolicySpec], GPUHealthPolicySpec] | None] = {
    "spares": _without_spares,
    "checkpointAwareDrain": _without_checkpoint_wait,
    "burnIn": _without_burn_in,
    "detection": None,
}
"""Each lever and how to take it away from a policy (None: from the contender)."""


@dataclass(frozen=True)
class Comparison:
    settings: Settings
    outcomes: dict[str, Outcome]
    """By contender name, the clusters without Pitcrew first."""
    attribution: dict[str, dict[str, float]] = field(default_factory=dict)
    """Policy name -> lever -> job goodput it adds (fraction; 0 where the policy does not
    use the lever)."""
    spares_curve: tuple[tuple[int, float], ...] = ()
    """(spares, job goodput) of the first Pitcrew policy."""
    target: float = 0.97
    """Job goodput the advice measures the gap to (ByteRobust's 97 %)."""
    warning_curve: tuple[tuple[float, float, float], ...] = ()
    """(warning share, stock job goodput, first Pitcrew policy's job goodput): how the
    result depends on the share of faults that show a precursor before they crash."""
    world_sweeps: tuple[tuple[Sweep, tuple[tuple[float, float, float], ...]], ...] = ()
    """Per number of the realistic world: (value, stock job goodput, first Pitcrew
    policy's job goodput) with that number varied and the rest held."""

    @property
    def reference(self) -> Outcome:
        """The run the advice is read from: the first Pitcrew policy, else the last
        cluster without Pitcrew (``stock`` when it ran)."""
        pitcrew = [o for name, o in self.outcomes.items() if name not in WITHOUT_PITCREW]
        return pitcrew[0] if pitcrew else list(self.outcomes.values())[-1]

    @property
    def gains(self) -> dict[str, float]:
        """What each Pitcrew policy adds to the stock cluster's job goodput (points as
        a fraction): the figure to quote, against what users run today."""
        stock = self.outcomes.get(STOCK)
        if stock is None:
            return {}
        return {
            name: o.job_goodput - stock.job_goodput
            for name, o in self.outcomes.items()
            if name not in WITHOUT_PITCREW
        }

    @property
    def mtbf_hours(self) -> float:
        """The job's mean time between interruptions that lost progress."""
        outcome = self.reference
        return outcome.hours / outcome.crashes if outcome.crashes else math.inf

    @property
    def checkpoint_interval(self) -> float | None:
        """Young/Daly's interval in seconds; None without a failure or a checkpoint cost."""
        return young_daly(self.settings.checkpoint_cost, self.mtbf_hours * HOUR)

    def json(self) -> dict[str, object]:
        """``pitcrew simulate --json``: the CLI contract (docs/goodput.md)."""
        mtbf = self.mtbf_hours
        interval = self.checkpoint_interval
        return {
            "policies": {name: o.json() for name, o in self.outcomes.items()},
            "gainOverStock": {name: round(gain, 6) for name, gain in self.gains.items()},
            "mtbfHours": round(mtbf, 3) if math.isfinite(mtbf) else None,
            "advice": {
                "checkpointInterval": round(interval, 1) if interval is not None else None,
                "target": self.target,
                "gap": [
                    {"badput": category, "share": round(share, 6), "remedy": remedy}
                    for category, share, remedy in gap(self.reference, self.target)
                ],
            },
            "attribution": {
                name: {lever: round(v, 6) for lever, v in levers.items()}
                for name, levers in self.attribution.items()
            },
            "sparesCurve": [{"spares": n, "jobGoodput": round(g, 6)} for n, g in self.spares_curve],
            "warningShareSweep": [
                {"warningShare": w, "stock": round(b, 6), "pitcrew": round(p, 6)}
                for w, b, p in self.warning_curve
            ],
            "worldSweeps": [
                {
                    "number": sweep.field,
                    "values": [
                        {"value": v, "stock": round(b, 6), "pitcrew": round(p, 6)}
                        for v, b, p in points
                    ],
                }
                for sweep, points in self.world_sweeps
            ],
            "settings": {
                "world": str(self.settings.world),
                "nodes": self.settings.nodes,
                "jobNodes": self.reference.job_nodes,
                "gpusPerNode": self.settings.gpus_per_node,
                "days": self.settings.days,
                "mix": self.settings.mix,
                "seed": self.settings.seed,
                "stepTime": self.settings.step_time,
                "checkpointInterval": self.settings.checkpoint_interval,
                "checkpointCost": self.settings.checkpoint_cost,
                "restartCost": self.settings.restart_cost,
                "stragglersPerNodeYear": self.settings.stragglers_per_node_year,
                "stragglerNoticeDelay": self.settings.straggler_notice_delay,
            },
        }


REMEDIES = {
    "wastedProgress": "checkpoint more often (the Young/Daly interval) or asynchronously; "
    "find silent corruption sooner",
    "recovery": "a faster restart (process start, NCCL init, checkpoint load: "
    "--restart-cost; in place where the launcher can), hangs ended before the NCCL "
    "watchdog, pods that start sooner, earlier detection",
    "waitingForCapacity": "hot spares (spares.count; the spares curve)",
    "checkpointing": "asynchronous checkpoints, or a longer interval",
}
"""What shrinks each badput category; which of them is the job's and which Pitcrew's."""


def gap(outcome: Outcome, target: float) -> list[tuple[str, float, str]]:
    """Below ``target``: each badput category, largest first, with its remedy; above it,
    nothing. The categories are the whole of the shortfall, so the largest ones are the
    levers that close the gap."""
    if outcome.job_goodput >= target:
        return []
    ranked = sorted(outcome.badput.items(), key=lambda item: -item[1])
    return [(category, share, REMEDIES[category]) for category, share in ranked if share > 0]


def young_daly(cost: float, mtbf: float) -> float | None:
    if cost <= 0 or not math.isfinite(mtbf) or mtbf <= 0:
        return None
    if cost >= 2 * mtbf:
        return mtbf
    return math.sqrt(2 * cost * mtbf) - cost


def compare(
    settings: Settings,
    contenders: Iterable[Contender],
    *,
    attribution: bool = True,
    spares_curve: Iterable[int] = (),
    assumptions: Assumptions | None = None,
    target: float = 0.97,
    warning_shares: Iterable[float] = (),
    world_sweeps: Iterable[Sweep] = (),
    progress: Callable[[str], None] = lambda _: None,
) -> Comparison:
    assumptions = assumptions or Assumptions()
    outcomes: dict[str, Outcome] = {}
    pitcrew: list[Contender] = []
    for contender in contenders:
        progress(contender.name)
        outcomes[contender.name] = run(settings, contender, assumptions)
        if not contender.baseline:
            pitcrew.append(contender)
    levers: dict[str, dict[str, float]] = {}
    if attribution:
        for contender in pitcrew:
            levers[contender.name] = _attribute(
                settings, contender, outcomes[contender.name], assumptions, progress
            )
    curve: list[tuple[int, float]] = []
    if pitcrew:
        first = pitcrew[0]
        for count in spares_curve:
            assert first.spec is not None
            progress(f"{first.name} with {count} spares")
            spec = with_spares(first.spec, count)
            outcome = run(settings, Contender(first.name, spec), assumptions)
            curve.append((count, outcome.job_goodput))
    sweep: list[tuple[float, float, float]] = []
    if pitcrew:
        for share in warning_shares:
            progress(f"warning share {share:g}")
            shared = settings.with_(warning_share=share)
            baseline = run(shared, Contender(STOCK, None), assumptions)
            policy = run(shared, pitcrew[0], assumptions)
            sweep.append((share, baseline.job_goodput, policy.job_goodput))
    worlds: list[tuple[Sweep, tuple[tuple[float, float, float], ...]]] = []
    if pitcrew:
        for number in world_sweeps:
            points: list[tuple[float, float, float]] = []
            for value in number.values:
                progress(f"{number.field} {value:g}")
                at = settings.with_(realism=varied(settings.realism, number, value))
                baseline = run(at, Contender(STOCK, None), assumptions)
                policy = run(at, pitcrew[0], assumptions)
                points.append((value, baseline.job_goodput, policy.job_goodput))
            worlds.append((number, tuple(points)))
    return Comparison(settings, outcomes, levers, tuple(curve), target, tuple(sweep), tuple(worlds))


def _attribute(
    settings: Settings,
    contender: Contender,
    outcome: Outcome,
    assumptions: Assumptions,
    progress: Callable[[str], None],
) -> dict[str, float]:
    spec = contender.spec
    assert spec is not None
    added: dict[str, float] = {}
    for lever, take_away in LEVERS.items():
        if take_away is None:
            without = Contender(contender.name, spec, detection=False)
        else:
            reduced = take_away(spec)
            if reduced == spec:
                added[lever] = 0.0  # the policy does not use it
                continue
            without = Contender(contender.name, reduced, detection=contender.detection)
        progress(f"{contender.name} without {lever}")
        added[lever] = outcome.job_goodput - run(settings, without, assumptions).job_goodput
    return added

"""Policies compared on one seed, what each of Pitcrew's levers adds, and advice.

Every contender meets the same faults (:func:`.mix.schedule` is seeded per node),
so differences between runs are the policies'. A lever's worth is measured by
taking it away from a policy and running again: the goodput lost is what the
lever adds. The levers are the ones Pitcrew owns:

- ``spares``: hot spares released when a node is quarantined (``spares.count`` 0);
- ``prePullImages``: each spare holds the job's images before it is needed, so a
  replacement pod there starts without the pull (``spares.prePullImages`` off);
- ``checkpointAwareDrain``: a Suspect node drains after its job's next checkpoint
  (without it: at once, ``safety.drain.checkpointMaxDelay`` 0);
- ``burnIn``: nodes back from repair or joining are burned in before they take
  work (``validation.burnInAfterRepair`` and ``burnInOnJoin`` off);
- ``detection``: the node agent's findings reach the operator at once (without
  it: only when a person would have noticed the crash);
- ``fastEviction``: where the job declares ``pitcrew.dev/progress-lost-on-fault``,
  its pods on a node with a fatal fault are deleted at once (without it: the job
  declares nothing and they are evicted). The job's lever, taken from the settings.
- ``inPlaceRestart``: where the job's pods declare a ``RestartAllContainers`` rule and
  run the hook, its pods elsewhere restart in place when Pitcrew takes a node from it,
  and only the lost pod is created again (without it: the launcher recreates every
  pod). The job's lever, taken from the settings.

Advice: the checkpoint interval by Young and Daly, ``sqrt(2·C·M) - C`` for a
checkpoint cost ``C`` and the job's measured mean time between failures ``M``
(J. T. Daly, "A higher order estimate of the optimum checkpoint interval for
restart dumps", 2006), and the job goodput for a range of spare counts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
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


def _without_pre_pull(spec: GPUHealthPolicySpec) -> GPUHealthPolicySpec:
    return spec.model_copy(
        update={"spares": spec.spares.model_copy(update={"pre_pull_images": False})}
    )


LEVERS: dict[str, Callable[[GPUHealthPolicySpec], GPUHealthPolicySpec] | None] = {
    "spares": _without_spares,
    "prePullImages": _without_pre_pull,
    "checkpointAwareDrain": _without_checkpoint_wait,
    "burnIn": _without_burn_in,
    "detection": None,
}
"""Each lever and how to take it away from a policy (None: from the contender)."""
JOB_LEVERS: dict[str, Callable[[Settings], Settings]] = {
    "fastEviction": lambda s: s.with_(progress_lost_on_fault=False),
    "inPlaceRestart": lambda s: s.with_(in_place_restart=False),
}
"""Levers Pitcrew pulls where the job asks for them, and how to take the job's asking
away (the same policy, the job as it was)."""


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
    jobs: int = 1,
) -> Comparison:
    """Every run the comparison needs, planned first and run by :func:`simulate`
    (``jobs`` at once); each run is seeded on its own, so ``jobs`` changes nothing
    in the result."""
    assumptions = assumptions or Assumptions()
    contenders = list(contenders)
    pitcrew = [c for c in contenders if not c.baseline]
    plan = [Planned(c.name, settings, c) for c in contenders]
    reduced = {c.name: _without_each_lever(c, settings) for c in pitcrew} if attribution else {}
    for name, without in reduced.items():
        plan += [
            Planned(f"{name} without {lever}", *other)
            for lever, other in without.items()
            if other is not None
        ]
    first = pitcrew[0] if pitcrew else None
    counts = list(spares_curve) if first is not None else []
    shares = list(warning_shares) if first is not None else []
    numbers = list(world_sweeps) if first is not None else []
    if first is not None:
        assert first.spec is not None
        for n in counts:
            spares = Contender(first.name, with_spares(first.spec, n))
            plan.append(Planned(f"{first.name} with {n} spares", settings, spares))
        for share in shares:
            plan += _stock_and(
                first, f"warning share {share:g}", settings.with_(warning_share=share)
            )
        for number in numbers:
            for value in number.values:
                at = settings.with_(realism=varied(settings.realism, number, value))
                plan += _stock_and(first, f"{number.field} {value:g}", at)
    results = iter(simulate(plan, assumptions, jobs=jobs, progress=progress))
    outcomes: dict[str, Outcome] = {}
    for contender in contenders:
        outcomes[contender.name] = next(results)
    levers = {
        name: {
            lever: 0.0 if other is None else outcomes[name].job_goodput - next(results).job_goodput
            for lever, other in without.items()
        }
        for name, without in reduced.items()
    }
    curve = tuple((n, next(results).job_goodput) for n in counts)
    sweep = tuple((share, *_pair(results)) for share in shares)
    worlds = tuple(
        (number, tuple((value, *_pair(results)) for value in number.values)) for number in numbers
    )
    return Comparison(settings, outcomes, levers, curve, target, sweep, worlds)


def _stock_and(first: Contender, label: str, settings: Settings) -> list[Planned]:
    """The stock cluster and the first Pitcrew policy at a point of a sweep."""
    return [
        Planned(f"{label}: {STOCK}", settings, Contender(STOCK, None)),
        Planned(f"{label}: {first.name}", settings, first),
    ]


def _pair(results: Iterator[Outcome]) -> tuple[float, float]:
    """The job goodputs of a sweep point's two runs (:func:`_stock_and`)."""
    stock = next(results)
    return stock.job_goodput, next(results).job_goodput


@dataclass(frozen=True)
class Planned:
    """One simulation of a comparison."""

    label: str
    """What the progress line names."""
    settings: Settings
    contender: Contender


def simulate(
    plan: Sequence[Planned],
    assumptions: Assumptions,
    *,
    jobs: int,
    progress: Callable[[str], None] = lambda _: None,
) -> list[Outcome]:
    """The outcomes of the planned runs, in plan order. With ``jobs`` above one they
    run in that many processes at once: the runs share nothing (each node draws its
    faults from its own seeded stream), so the outcomes are those of one process."""
    if jobs <= 1 or len(plan) <= 1:
        outcomes = []
        for planned in plan:
            progress(planned.label)
            outcomes.append(run(planned.settings, planned.contender, assumptions))
        return outcomes
    with ProcessPoolExecutor(max_workers=min(jobs, len(plan))) as pool:
        futures = []
        for planned in plan:
            progress(planned.label)
            futures.append(pool.submit(run, planned.settings, planned.contender, assumptions))
        return [future.result() for future in futures]


def _without_each_lever(
    contender: Contender, settings: Settings
) -> dict[str, tuple[Settings, Contender] | None]:
    """The run without each lever in turn; None where the policy (or, for the job's
    levers, the job) does not use it."""
    spec = contender.spec
    assert spec is not None
    without: dict[str, tuple[Settings, Contender] | None] = {}
    for lever, take_away in LEVERS.items():
        if take_away is None:
            without[lever] = (settings, Contender(contender.name, spec, detection=False))
            continue
        reduced = take_away(spec)
        if reduced == spec:
            without[lever] = None
        else:
            other = Contender(contender.name, reduced, detection=contender.detection)
            without[lever] = (settings, other)
    for lever, job_takes_away in JOB_LEVERS.items():
        plain = job_takes_away(settings)
        without[lever] = None if plain == settings else (plain, contender)
    return without

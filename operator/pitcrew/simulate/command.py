"""``pitcrew simulate``: the command line, the table and the JSON of a comparison.

The flags are a contract that automation depends on (docs/goodput.md): each maps
to one field of :class:`.settings.Settings`; durations are written like the
policy's (``90s``, ``30m``, ``6000h``) or in days (``3d``). ``--json`` prints one
object and nothing else on standard output; progress goes to standard error.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from dataclasses import replace
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table

from pitcrew.api.meta import Duration
from pitcrew.api.policy import GPUHealthPolicy, GPUHealthPolicySpec
from pitcrew.simulate.compare import Comparison, compare
from pitcrew.simulate.errors import SimulationInputError
from pitcrew.simulate.mix import MIXES
from pitcrew.simulate.realism import REALISTIC, SWEEPS, WORLDS, Realism, WorldKind, world
from pitcrew.simulate.settings import (
    DEFAULTS,
    Contender,
    Settings,
    baselines,
    default_spec,
    with_spares,
)
from pitcrew.simulate.tables import STRAGGLER_LABELS, gap_lines, percent, straggler_cells

WARNING_SWEEP = (0.0, 0.1, 0.3, 0.5)
"""Precursor shares the report's sensitivity sweep runs (the default is 0.1)."""
_DAYS = re.compile(r"^([0-9]+(?:\.[0-9]+)?)d$")


def spares_curve(headroom: int) -> tuple[int, ...]:
    """Spare counts for the report's sizing curve: none up to all of the pool's headroom
    (the nodes the job leaves), in doublings (0, 8, 16, 32, 64 of 64)."""
    return tuple(sorted({0, *(headroom // d for d in (8, 4, 2, 1) if headroom // d > 0)}))


def duration(text: str) -> float:
    """Seconds of a policy-style duration, or of ``Nd`` days."""
    days = _DAYS.fullmatch(text)
    if days:
        return float(days.group(1)) * 86400.0
    try:
        return Duration(text).total_seconds()
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{error}, or days like 3d") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    base = Settings()
    parser.add_argument("--nodes", type=int, default=base.nodes, help="nodes in the pool")
    parser.add_argument("--gpus-per-node", type=int, default=base.gpus_per_node)
    parser.add_argument("--days", type=float, default=base.days, help="simulated days")
    parser.add_argument("--mix", choices=MIXES, default=base.mix, help="failure process")
    parser.add_argument(
        "--node-mtbf",
        type=duration,
        help="mean time between failures of one node (exponential; rescales a mix)",
    )
    parser.add_argument(
        "--job-nodes", type=int, help="nodes the job runs on (default: the pool less 3 %%)"
    )
    parser.add_argument("--step-time", type=duration, default=base.step_time)
    parser.add_argument("--checkpoint-interval", type=duration, default=base.checkpoint_interval)
    parser.add_argument("--checkpoint-cost", type=duration, default=base.checkpoint_cost)
    parser.add_argument(
        "--async-checkpoint",
        action="store_true",
        help="training goes on while a checkpoint is written",
    )
    parser.add_argument("--restart-cost", type=duration, default=base.restart_cost)
    parser.add_argument(
        "--progress-lost-on-fault",
        action="store_true",
        help="the job's pods declare pitcrew.dev/progress-lost-on-fault: a fatal fault's "
        "node has them deleted at once",
    )
    parser.add_argument(
        "--in-place-restart",
        action="store_true",
        help="the job's pods declare a RestartAllContainers restart rule and run the hook: "
        "when Pitcrew takes a node from under the job, the others restart in place",
    )
    parser.add_argument(
        "--spares", type=int, help="hot spares of every Pitcrew policy (default: its own)"
    )
    parser.add_argument(
        "--policy",
        type=Path,
        action="append",
        default=[],
        help="a GPUHealthPolicy YAML to compare (repeatable)",
    )
    parser.add_argument(
        "--baseline",
        action="store_true",
        help="only the clusters without Pitcrew (people, stock); default: those, the "
        "defaults and each --policy",
    )
    parser.add_argument("--lemons", type=int, default=0, help="nodes failing 10x as often")
    parser.add_argument(
        "--warning-share",
        type=float,
        default=base.warning_share,
        help="share of faults with a precursor that show it before the crash (0.1)",
    )
    parser.add_argument(
        "--detection-delay",
        type=duration,
        default=base.detection_delay,
        help="median time for a person to notice a crashed job (30m)",
    )
    parser.add_argument(
        "--ticket-delay",
        type=duration,
        default=base.ticket_delay,
        help="median time from a ticket to a person's repair (4h)",
    )
    parser.add_argument(
        "--stragglers-per-node-year",
        type=float,
        default=base.stragglers_per_node_year,
        help="GPUs that run slow without a finding, per node and year: an assumption "
        "(0.1; 0 disables)",
    )
    parser.add_argument(
        "--straggler-notice-delay",
        type=duration,
        default=base.straggler_notice_delay,
        help="median time for a person to notice a slow job and find the node (12h)",
    )
    parser.add_argument(
        "--world",
        choices=WORLDS,
        default=base.world.value,
        help="realistic: hangs, pod start at size, image pulls, restart failures, snapshot "
        "stalls, rack and leaf switch faults, late silent corruption, stragglers under the "
        "threshold, contended spares; kind: none of them, the figures of earlier versions",
    )
    world_flags = parser.add_argument_group(
        "the realistic world's numbers (docs/goodput.md cites each; default: the world's)"
    )
    for flag, kind, text in _REALISM_FLAGS:
        world_flags.add_argument(flag, type=kind, help=text)
    parser.add_argument("--seed", type=int, default=base.seed)
    parser.add_argument(
        "--no-attribution", action="store_true", help="skip the per-lever runs (faster)"
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        help="simulations run at once, one process each (default: the CPUs); the "
        "results do not depend on it",
    )
    parser.add_argument(
        "--target",
        type=float,
        default=0.97,
        help="job goodput the advice measures the gap to (default 0.97)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--report", type=Path, help="write report.md and PNG plots (needs matplotlib)"
    )


_REALISM_FLAGS = (
    (
        "--hang-share",
        float,
        f"share of GPU, network and software faults that hang ({REALISTIC.hang_share:g})",
    ),
    (
        "--pod-start",
        duration,
        "time until the job's pods all run (default: the devcluster's at its size)",
    ),
    (
        "--image-pull",
        duration,
        f"time a node takes to pull the job's images ({REALISTIC.image_pull:g}s)",
    ),
    ("--restart-failure", float, f"share of restarts that fail ({REALISTIC.restart_failure:g})"),
    (
        "--snapshot-stall",
        duration,
        f"training stopped per asynchronous snapshot ({REALISTIC.snapshot_stall:g}s)",
    ),
    ("--sdc-detection", duration, "median time until silent corruption is found (1h; 0: at once)"),
    (
        "--spare-contention",
        float,
        f"share of spares other work had borrowed ({REALISTIC.spare_contention:g})",
    ),
)


def realism_from(args: argparse.Namespace) -> Realism:
    """The chosen world with the numbers set on the command line."""
    chosen = world(WorldKind(args.world))
    changes = {
        flag[2:].replace("-", "_"): getattr(args, flag[2:].replace("-", "_"))
        for flag, _, _ in _REALISM_FLAGS
    }
    return replace(chosen, **{k: v for k, v in changes.items() if v is not None})


def settings_from(args: argparse.Namespace) -> Settings:
    return Settings(
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        days=args.days,
        mix=args.mix,
        node_mtbf=args.node_mtbf,
        job_nodes=args.job_nodes,
        step_time=args.step_time,
        checkpoint_interval=args.checkpoint_interval,
        checkpoint_cost=args.checkpoint_cost,
        async_checkpoint=args.async_checkpoint,
        restart_cost=args.restart_cost,
        progress_lost_on_fault=args.progress_lost_on_fault,
        in_place_restart=args.in_place_restart,
        spares=args.spares,
        seed=args.seed,
        lemons=args.lemons,
        warning_share=args.warning_share,
        detection_delay=args.detection_delay,
        ticket_delay=args.ticket_delay,
        stragglers_per_node_year=args.stragglers_per_node_year,
        straggler_notice_delay=args.straggler_notice_delay,
        realism=realism_from(args),
    )


def contenders_from(args: argparse.Namespace, settings: Settings) -> list[Contender]:
    found = baselines()
    if args.baseline:
        return found
    specs = [(DEFAULTS, default_spec())] + [_policy(path) for path in args.policy]
    for name, spec in specs:
        spares = settings.spares
        found.append(Contender(name, spec if spares is None else with_spares(spec, spares)))
    names = [c.name for c in found]
    if len(set(names)) != len(names):
        raise SimulationInputError(f"two policies share a name: {names}")
    return found


def _policy(path: Path) -> tuple[str, GPUHealthPolicySpec]:
    try:
        body = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise SimulationInputError(f"cannot read {path}: {error}") from None
    if not isinstance(body, dict) or body.get("kind") != GPUHealthPolicy.KIND:
        raise SimulationInputError(f"{path} is not a GPUHealthPolicy (kind)")
    try:
        spec = GPUHealthPolicySpec.model_validate(body.get("spec"))
    except ValueError as error:
        raise SimulationInputError(f"{path} is not a valid GPUHealthPolicy:\n{error}") from None
    name = (body.get("metadata") or {}).get("name") or path.stem
    return str(name), spec


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="pitcrew simulate",
        description="A fleet and its training job in simulated time: a cluster where "
        "people do everything, a stock GPU cluster (the device plugin's health check, "
        "NotReady eviction), Pitcrew's defaults and each --policy, on the same faults.",
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    if args.stragglers_per_node_year < 0:
        parser.error("--stragglers-per-node-year must not be negative")
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    settings = settings_from(args)
    contenders = contenders_from(args, settings)
    err = Console(stderr=True)
    curve: tuple[int, ...] = ()
    if args.report is not None:
        curve = spares_curve(settings.nodes - settings.job_size)
    try:
        comparison = compare(
            settings,
            contenders,
            attribution=not args.no_attribution,
            spares_curve=curve,
            target=args.target,
            warning_shares=WARNING_SWEEP if args.report is not None else (),
            world_sweeps=SWEEPS
            if args.report is not None and settings.world is WorldKind.REALISTIC
            else (),
            progress=lambda name: err.print(f"simulating {name} ...", highlight=False),
            jobs=args.jobs,
        )
    except ValueError as error:
        raise SimulationInputError(str(error)) from None
    if args.report is not None:
        from pitcrew.simulate.report import write  # noqa: PLC0415 - matplotlib is optional

        written = write(comparison, args.report)
        err.print(f"report written: {written}", highlight=False)
    if args.json:
        print(json.dumps(comparison.json(), indent=None, sort_keys=False))
    else:
        render(comparison, Console(width=max(Console().width, 120)))
    return 0


def render(comparison: Comparison, console: Console) -> None:
    settings = comparison.settings
    reference = comparison.reference
    console.print(
        f"[bold]pitcrew simulate[/bold]: {settings.mix}, {settings.world} world, "
        f"{settings.days:g} days, "
        f"{reference.job_nodes} of {settings.nodes} nodes x {settings.gpus_per_node} GPUs "
        f"for the job, seed {settings.seed}"
    )
    table = Table()
    table.add_column("policy")
    for column in ("job goodput", "fleet goodput", *_BADPUT_LABELS, "interruptions", "spares"):
        table.add_column(column, justify="right")
    for name, o in comparison.outcomes.items():
        table.add_row(
            name,
            percent(o.job_goodput),
            percent(o.fleet_goodput),
            *(percent(o.badput[k]) for k in _BADPUT_LABELS.values()),
            str(o.interruptions),
            str(o.spares),
        )
    console.print(table)
    if settings.stragglers_per_node_year > 0:
        console.print(straggler_table(comparison))
    for name, gain in comparison.gains.items():
        console.print(f"{name} over the stock cluster: {gain * 100:+.2f} pts of job goodput")
    for name, levers in comparison.attribution.items():
        parts = ", ".join(f"{lever} {value * 100:+.2f} pts" for lever, value in levers.items())
        console.print(f"what each lever adds to {name}: {parts}")
    if comparison.spares_curve:
        curve = ", ".join(f"{n}: {percent(g)}" for n, g in comparison.spares_curve)
        console.print(f"job goodput by spares: {curve}")
    if comparison.warning_curve:
        sweep = ", ".join(
            f"{w:g}: {percent(b)} / {percent(p)}" for w, b, p in comparison.warning_curve
        )
        console.print(f"job goodput by warning share (stock / {reference.name}): {sweep}")
    for line in gap_lines(comparison):
        console.print(line, highlight=False)
    interval = comparison.checkpoint_interval
    advice = f"{interval / 60:.1f} min" if interval is not None else "n/a"
    console.print(
        f"job MTBF {comparison.mtbf_hours:.2f} h; Young/Daly checkpoint interval {advice} "
        f"(set: {settings.checkpoint_interval / 60:.1f} min, cost {settings.checkpoint_cost:g} s)"
    )


def straggler_table(comparison: Comparison) -> Table:
    settings = comparison.settings
    table = Table(
        title=f"stragglers ({settings.stragglers_per_node_year:g} per node-year, an "
        "assumption: docs/goodput.md)"
    )
    table.add_column("policy")
    for column in STRAGGLER_LABELS:
        table.add_column(column, justify="right")
    for name, o in comparison.outcomes.items():
        table.add_row(name, *straggler_cells(o))
    return table


_BADPUT_LABELS = {
    "wasted": "wastedProgress",
    "recovery": "recovery",
    "waiting": "waitingForCapacity",
    "checkpointing": "checkpointing",
}

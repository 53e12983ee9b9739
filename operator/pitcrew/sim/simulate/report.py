"""``pitcrew simulate --report DIR``: a Markdown page and its PNG plots.

Three plots, each answering one question an SRE asks of a policy: how goodput
moved over the run (``goodput.png``: each day's job goodput per policy), where
the rest of the time went (``badput.png``: the badput shares per policy), and
how many spares are worth holding (``spares.png``: job goodput by spare count,
when the pool leaves room for spares). matplotlib is imported here only, so
the rest of the simulator runs without it.
"""

from __future__ import annotations

from pathlib import Path

from pitcrew.sim.simulate.command import gap_lines
from pitcrew.sim.simulate.compare import Comparison
from pitcrew.sim.simulate.run import BADPUT


def write(comparison: Comparison, directory: Path) -> Path:
    try:
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        raise SystemExit(
            "pitcrew simulate --report needs matplotlib: pip install 'pitcrew[report]'"
        ) from None
    directory.mkdir(parents=True, exist_ok=True)
    outcomes = comparison.outcomes

    figure, axes = plt.subplots(figsize=(8, 4))
    for name, outcome in outcomes.items():
        days = [d for d, _ in outcome.daily]
        axes.plot(days, [g * 100 for _, g in outcome.daily], marker=".", label=name)
    axes.set_xlabel("day")
    axes.set_ylabel("job goodput that day (%)")
    axes.set_title("Job goodput over time")
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(directory / "goodput.png", dpi=100)
    plt.close(figure)

    figure, axes = plt.subplots(figsize=(8, 4))
    names = list(outcomes)
    bottom = [0.0] * len(names)
    for category in BADPUT:
        values = [outcomes[n].badput[category] * 100 for n in names]
        axes.bar(names, values, bottom=bottom, label=category)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    axes.set_ylabel("share of job wall time (%)")
    axes.set_title("Badput by category")
    axes.legend()
    figure.tight_layout()
    figure.savefig(directory / "badput.png", dpi=100)
    plt.close(figure)

    plots = ["goodput.png", "badput.png"]
    if comparison.spares_curve:
        figure, axes = plt.subplots(figsize=(8, 4))
        counts = [n for n, _ in comparison.spares_curve]
        axes.plot(counts, [g * 100 for _, g in comparison.spares_curve], marker="o")
        axes.set_xlabel("hot spares")
        axes.set_ylabel("job goodput (%)")
        axes.set_title(f"Spare-pool sizing ({comparison.reference.name})")
        axes.grid(alpha=0.3)
        figure.tight_layout()
        figure.savefig(directory / "spares.png", dpi=100)
        plt.close(figure)
        plots.append("spares.png")

    page = directory / "report.md"
    page.write_text(markdown(comparison, plots))
    return page


def markdown(comparison: Comparison, plots: list[str]) -> str:
    settings = comparison.settings
    reference = comparison.reference
    lines = [
        "# pitcrew simulate report",
        "",
        f"Mix `{settings.mix}`, {settings.days:g} days, seed {settings.seed}: a job on "
        f"{reference.job_nodes} of {settings.nodes} nodes ({settings.gpus_per_node} GPUs "
        f"each), step {settings.step_time:g} s, a checkpoint every "
        f"{settings.checkpoint_interval / 60:g} min costing {settings.checkpoint_cost:g} s "
        f"({'asynchronous' if settings.async_checkpoint else 'blocking'}), restart "
        f"{settings.restart_cost / 60:g} min. Every policy met the same faults.",
        "",
        "| policy | job goodput | fleet goodput | "
        + " | ".join(BADPUT)
        + " | interruptions | spares |",
        "|---|" + "---:|" * (4 + len(BADPUT)),
    ]
    for name, o in comparison.outcomes.items():
        badput = " | ".join(f"{o.badput[k] * 100:.2f} %" for k in BADPUT)
        lines.append(
            f"| {name} | {o.job_goodput * 100:.2f} % | {o.fleet_goodput * 100:.2f} % | "
            f"{badput} | {o.interruptions} | {o.spares} |"
        )
    lines.append("")
    for name, levers in comparison.attribution.items():
        lines.append(f"What each lever adds to `{name}` (job goodput, points):")
        lines.append("")
        lines.extend(f"- {lever}: {value * 100:+.2f}" for lever, value in levers.items())
        lines.append("")
    interval = comparison.checkpoint_interval
    lines.append(
        f"Job MTBF under `{reference.name}`: {comparison.mtbf_hours:.2f} h. "
        + (
            f"Young/Daly checkpoint interval for a {settings.checkpoint_cost:g} s "
            f"checkpoint: {interval / 60:.1f} min (set: "
            f"{settings.checkpoint_interval / 60:g} min)."
            if interval is not None
            else "No interruption: no checkpoint advice."
        )
    )
    lines.append("")
    gap = gap_lines(comparison)
    if gap:
        lines += [*gap, ""]
    lines.extend(f"![{plot}]({plot})" for plot in plots)
    lines.append("")
    return "\n".join(lines)

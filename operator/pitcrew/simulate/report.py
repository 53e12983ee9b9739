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

from pitcrew.simulate.compare import Comparison
from pitcrew.simulate.errors import ReportUnavailableError
from pitcrew.simulate.run import BADPUT
from pitcrew.simulate.tables import STRAGGLER_LABELS, gap_lines, straggler_cells

Series = list[tuple[str, list[float], list[float]]]
"""Named lines of a plot: (label, x values, y values)."""


def write(comparison: Comparison, directory: Path) -> Path:
    try:
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        raise ReportUnavailableError(
            "--report needs matplotlib: pip install 'pitcrew[report]'"
        ) from None
    directory.mkdir(parents=True, exist_ok=True)
    outcomes = comparison.outcomes
    reference = comparison.reference.name

    def line_plot(name: str, series: Series, xlabel: str, ylabel: str, title: str) -> str:
        figure, axes = plt.subplots(figsize=(8, 4))
        for label, xs, ys in series:
            axes.plot(xs, ys, marker="o" if len(xs) < 12 else ".", label=label)
        axes.set_xlabel(xlabel)
        axes.set_ylabel(ylabel)
        axes.set_title(title)
        axes.grid(alpha=0.3)
        if len(series) > 1:
            axes.legend()
        figure.tight_layout()
        figure.savefig(directory / name, dpi=100)
        plt.close(figure)
        return name

    plots = [
        line_plot(
            "goodput.png",
            [
                (name, [d for d, _ in o.daily], [g * 100 for _, g in o.daily])
                for name, o in outcomes.items()
            ],
            "day",
            "job goodput that day (%)",
            "Job goodput over time",
        )
    ]

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
    plots.append("badput.png")

    curve = comparison.spares_curve
    if curve:
        plots.append(
            line_plot(
                "spares.png",
                [(reference, [float(n) for n, _ in curve], [g * 100 for _, g in curve])],
                "hot spares",
                "job goodput (%)",
                f"Spare-pool sizing ({reference})",
            )
        )
    sweep = comparison.warning_curve
    if sweep:
        shares = [w for w, _, _ in sweep]
        plots.append(
            line_plot(
                "warning.png",
                [
                    ("stock", shares, [b * 100 for _, b, _ in sweep]),
                    (reference, shares, [p * 100 for _, _, p in sweep]),
                ],
                "share of faults that show a precursor before the crash",
                "job goodput (%)",
                "Sensitivity to early detection",
            )
        )

    page = directory / "report.md"
    page.write_text(markdown(comparison, plots))
    return page


def straggler_lines(comparison: Comparison) -> list[str]:
    """The stragglers' table: what the pace of a slow node cost each policy's job."""
    rate = comparison.settings.stragglers_per_node_year
    lines = [
        f"Stragglers ({rate:g} per node-year, an assumption): the job runs at its slowest "
        "rank's pace, which the badput (time) does not show.",
        "",
        "| policy | " + " | ".join(STRAGGLER_LABELS) + " |",
        "|---|" + "---:|" * len(STRAGGLER_LABELS),
    ]
    for name, o in comparison.outcomes.items():
        lines.append(f"| {name} | " + " | ".join(straggler_cells(o)) + " |")
    return [*lines, ""]


def markdown(comparison: Comparison, plots: list[str]) -> str:
    settings = comparison.settings
    reference = comparison.reference
    lines = [
        "# pitcrew simulate report",
        "",
        f"Mix `{settings.mix}`, the {settings.world} world, {settings.days:g} days, "
        f"seed {settings.seed}: a job on "
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
    for name, gain in comparison.gains.items():
        lines.append(f"`{name}` over the stock cluster: {gain * 100:+.2f} points of job goodput.")
    if comparison.gains:
        lines.append("")
    if settings.stragglers_per_node_year > 0:
        lines += straggler_lines(comparison)
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
    if comparison.warning_curve:
        lines += [
            "Sensitivity to the share of faults that warn before they crash (job goodput):",
            "",
            "| warning share | stock | " + reference.name + " |",
            "|---:|---:|---:|",
        ]
        lines += [
            f"| {w:g} | {b * 100:.2f} % | {p * 100:.2f} % |" for w, b, p in comparison.warning_curve
        ]
        lines.append("")
    for sweep, points in comparison.world_sweeps:
        lines += [
            f"Sensitivity to the {sweep.label} (job goodput; the realistic world's other "
            "numbers held):",
            "",
            f"| {sweep.field} | stock | {reference.name} |",
            "|---:|---:|---:|",
        ]
        lines += [f"| {v:g} | {b * 100:.2f} % | {p * 100:.2f} % |" for v, b, p in points]
        lines.append("")
    gap = gap_lines(comparison)
    if gap:
        lines += [*gap, ""]
    lines.extend(f"![{plot}]({plot})" for plot in plots)
    lines.append("")
    return "\n".join(lines)

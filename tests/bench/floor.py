"""The least any operator must do, measured on the same cluster in the same run.

An operator that cordons a node after its agent's report has at least to see the
report and write one patch, on the apiserver every other client is using too. No
operator's cordon can come sooner than that of :class:`Floor`: a client that writes
the report itself and cordons the node with one patch the moment the apiserver has
accepted the report. Measured beside Pitcrew's figure, on the same cluster, the same
heartbeats, the same load average, Pitcrew's figure is read as a ratio to it, which
travels between machines where absolute seconds do not (a 2-core machine shared by
others, a real control plane on cores of its own).

How the floor stays the floor with the operator running beside it (its watches, its
Lease and its decisions of every heartbeat are part of the load the figure is
taken under):

- The report it writes is the agent's healthy one: the same server-side apply as
  the fault's (the same fields, stamped with the same times), so the apiserver does
  the same work, but no verdict changes and the operator decides nothing to do.
- The cordon sets ``spec.unschedulable`` and a taint of the benchmark's own
  (:data:`FLOOR_TAINT`, not Pitcrew's) in one merge patch; a cordon that is not
  Pitcrew's is one Pitcrew leaves alone. :meth:`Floor.release` lifts it afterwards,
  so the nodes are as they were for what the run measures next.
- The reports go out from as many threads as the benchmark's fault reports
  (:data:`WORKERS`), and each cordon from a pool of its own, so a cordon never
  holds back another node's report.

The drain's floor, one eviction per pod, is :func:`drain_scenarios.floor_drain`.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench_cluster import CordonWatch, quantiles
from fleet_reports import FleetReports
from kubernetes import client

FLOOR_TAINT = "bench.pitcrew.dev/floor"
WORKERS = 32
"""Threads writing reports at once, as the benchmark writes a burst's faults."""


def cordon_patch(*, on: bool) -> dict[str, Any]:
    """One merge patch: cordoned with the floor's taint, or neither."""
    taints = [{"key": FLOOR_TAINT, "value": "floor", "effect": "NoSchedule"}] if on else None
    return {"spec": {"unschedulable": on or None, "taints": taints}}


class Floor:
    def __init__(self, api: client.ApiClient, reports: FleetReports) -> None:
        self.core = client.CoreV1Api(api)
        self.api = api
        self.reports = reports

    def _cordon(self, node: str) -> None:
        self.core.patch_node(node, cordon_patch(on=True))

    def burst(self, targets: list[str]) -> dict[str, Any]:
        """``targets``' reports at once, each node cordoned as soon as its report is
        accepted; report to cordon per node (as the watch saw it) and until all are."""
        watch = CordonWatch(self.api, targets)
        sent: dict[str, float] = {}
        with (
            ThreadPoolExecutor(max_workers=WORKERS) as cordons,
            ThreadPoolExecutor(max_workers=WORKERS) as writes,
        ):

            def report(node: str) -> None:
                sent[node] = self.reports.write(node)
                cordons.submit(self._cordon, node)

            list(writes.map(report, targets))
        watch.wait(targets, timeout=600)
        return figures(watch, sent, targets)

    def one_by_one(self, targets: list[str], *, gap: float) -> dict[str, Any]:
        """A report and its cordon at a time, ``gap`` seconds apart."""
        watch = CordonWatch(self.api, targets)
        sent: dict[str, float] = {}
        for node in targets:
            sent[node] = self.reports.write(node)
            self._cordon(node)
            watch.wait([node], timeout=60)
            time.sleep(gap)
        return figures(watch, sent, targets)

    def release(self, nodes: list[str]) -> None:
        """Lift the floor's cordons (its taint is the only one a bench node has)."""
        with ThreadPoolExecutor(max_workers=WORKERS) as pool:
            list(pool.map(lambda node: self.core.patch_node(node, cordon_patch(on=False)), nodes))


def figures(watch: CordonWatch, sent: dict[str, float], targets: list[str]) -> dict[str, Any]:
    cordoned = watch.cordoned
    latencies = [cordoned[n] - sent[n] for n in targets if n in cordoned]
    return {
        "cordoned": len(latencies),
        "report_to_cordon_s": quantiles(latencies),
        "all_cordoned_after_s": round(max(cordoned.values()) - min(sent.values()), 3)
        if cordoned
        else None,
    }


def ratios(measured: dict[str, Any], floor: dict[str, Any]) -> dict[str, float]:
    """Pitcrew's figures over the floor's: p50, p90, p99, and all cordoned (when both
    have it)."""
    found: dict[str, float] = {}
    ours, least = measured.get("report_to_cordon_s") or {}, floor.get("report_to_cordon_s") or {}
    for key in ("p50", "p90", "p99"):
        if ours.get(key) and least.get(key):
            found[key] = round(ours[key] / least[key], 2)
    if measured.get("all_cordoned_after_s") and floor.get("all_cordoned_after_s"):
        found["all_cordoned"] = round(
            measured["all_cordoned_after_s"] / floor["all_cordoned_after_s"], 2
        )
    return found

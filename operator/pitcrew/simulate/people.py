"""People: they notice a crashed job, find the node, open a ticket and repair it.

Without Pitcrew (``people``, ``stock``) they are the only ones who repair: a
fault is noticed when the job crashes (``detection_delay``), the node is
cordoned and drained by hand (on a stock cluster, the device plugin has kept the
job's pod off a GPU with a fatal Xid meanwhile), and a ticket (``ticket_delay``)
later a person does the repair that fixes it: a reboot for what a reset or a
reboot clears, a reimage, or a new part. They diagnose right the first time and
put the node back without a burn-in. A straggler crashes nothing: they notice
the slow job later (``straggler_notice_delay``, counted from when the job began
to run on the slow node) and take the node out the same way.

Beside Pitcrew they do what it cannot: repair a host that stopped or a GPU that
corrupts silently (no agent finding), a straggler Pitcrew does not judge
(``stragglers.enabled`` false, or slower than the median by less than the
policy's threshold), and take the nodes Pitcrew retired for repair (RMA), after
which a node rejoins as a new one (Pitcrew burns it in).
"""

from __future__ import annotations

from dataclasses import replace

from pitcrew.api.gpunode import HISTORY_LIMIT, Phase, Transition
from pitcrew.core.views import NodeView
from pitcrew.simulate import timing
from pitcrew.simulate.clock import at
from pitcrew.simulate.mix import Depth, Fault, Shows
from pitcrew.simulate.node import Node
from pitcrew.simulate.settings import Settings
from pitcrew.simulate.timing import LogNormal, spread
from pitcrew.simulate.world import World

DETECTION_SPREAD = 4.0
"""A person's 90th percentile to notice a crash is four times the median (nights)."""
TICKET_SPREAD = 6.0
"""A ticket's 90th percentile is six times the median (weekends, parts, queues)."""


class People:
    def __init__(self, world: World, settings: Settings, *, everything: bool) -> None:
        self.world, self.clock = world, world.clock
        self.everything = everything
        self.detection = spread(settings.detection_delay, DETECTION_SPREAD)
        self.ticket = spread(settings.ticket_delay, TICKET_SPREAD)
        self.slow_job = spread(settings.straggler_notice_delay, DETECTION_SPREAD)
        self.lemon_factor = settings.lemon_factor
        self.repairs = 0
        self.rmas = 0

    def notice_delay(self, fault: Fault) -> float:
        if fault.kind.shows is Shows.SLOW:
            return self.slow_job.at(fault.z[0])
        return self.detection.at(fault.z[0])

    def by_hand(self, fault: Fault | None) -> float:
        """A ticket, then the repair that fixes the fault (a webhook rung's time)."""
        z = fault.z[1] if fault is not None else 0.0
        return self.ticket.at(z) + self.fix_time(fault)

    def fix_time(self, fault: Fault | None) -> float:
        if fault is None:
            return timing.REBOOT.median
        return self._fix(fault).at(fault.z[2])

    @staticmethod
    def _fix(fault: Fault) -> LogNormal:
        if fault.depth is Depth.HARDWARE:
            return fault.kind.part
        if fault.depth is Depth.REIMAGE:
            return timing.REIMAGE
        return timing.REBOOT

    # -- faults on nodes ------------------------------------------------------------------

    def struck(self, node: Node, fault: Fault) -> None:
        """A fault crashed whatever ran on the node, or the job began to run on a slow
        one: someone notices it in time, unless Pitcrew sees it first (a finding of
        the node agent, the job's reports naming its straggler)."""
        if not self.everything and self._pitcrew_sees(fault):
            return
        self.clock.after(self.notice_delay(fault), self._notice, node, fault)

    def _pitcrew_sees(self, fault: Fault) -> bool:
        operator = self.world.operator
        if fault.kind.shows is Shows.SLOW:
            return operator is not None and operator.judges(fault)
        return fault.kind.shows is Shows.GPU

    def _notice(self, node: Node, fault: Fault) -> None:
        if node.fault is not fault or node.held or node.away:
            return
        node.held = True
        node.view = replace(node.view, unschedulable=True)  # a person's cordon, not Pitcrew's
        self.world.evict(node, force=False)
        self._phase(node, Phase.QUARANTINED, "CordonedByHand")
        self.world.refresh(node)
        self.world.mark(node)
        self.clock.after(self.ticket.at(fault.z[1]), self._repair, node, fault)

    def _repair(self, node: Node, fault: Fault) -> None:
        self._phase(node, Phase.REMEDIATING, "RepairedByHand")
        self.world.down(node)
        self.clock.after(self.fix_time(fault), self._repaired, node, fault)

    def _repaired(self, node: Node, fault: Fault) -> None:
        self.repairs += 1
        if node.fault is fault:
            self.world.clear(node)
        if fault.depth is Depth.REIMAGE:
            node.images_at = None  # a reimage empties the image store
        node.held = False
        node.view = replace(node.view, unschedulable=False)
        self._phase(node, Phase.HEALTHY, "Repaired")
        self.world.up(node)

    def _phase(self, node: Node, phase: Phase, reason: str) -> None:
        """The baseline's phases, for the fleet ledger: cordoned, in repair, back."""
        if not self.everything or node.phase is phase:
            return
        old, node.phase = node.phase, phase
        node.history.append(
            Transition(time=at(self.clock.now), from_phase=old, to_phase=phase, reason=reason)
        )
        del node.history[:-HISTORY_LIMIT]
        self.world.moved(node, old, phase)

    # -- nodes Pitcrew retired ------------------------------------------------------------

    def retired(self, node: Node) -> None:
        z = node.fault.z[1] if node.fault is not None else node.rng.gauss(0.0, 1.0)
        self.clock.after(self.ticket.at(z), self._take_away, node)

    def _take_away(self, node: Node) -> None:
        operator = self.world.operator
        if operator is None or node.status.phase is not Phase.RETIRED or node.away:
            return
        self.rmas += 1
        operator.remove(node)
        node.away = True
        self.world.down(node)
        fault = node.fault
        if fault is not None:
            duration = self._fix(fault).at(fault.z[2])
        else:
            duration = timing.GPU_RMA.draw(node.rng)  # a lemon gets new parts
        self.clock.after(duration, self._rejoin, node)

    def _rejoin(self, node: Node) -> None:
        operator = self.world.operator
        assert operator is not None
        if node.fault is not None:
            self.world.clear(node)
        if node.lemon:
            node.lemon, node.thinning = False, 1.0 / self.lemon_factor
        node.away = False
        node.images_at = None  # back from RMA reprovisioned
        node.boots += 1
        node.view = NodeView(
            name=node.name, created=at(self.clock.now), gpus=node.gpus, boot_id=node.boot_id
        )
        node.down_since = None
        operator.rejoin(node)
        self.world.refresh(node)

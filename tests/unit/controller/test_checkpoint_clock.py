"""A Suspect node drains after its jobs' next checkpoint, judged by when the operator
saw the checkpoint, never by the time a node's clock wrote into it: a node clock ahead
made a checkpoint from before the take-out look new (the drain began too soon, the
work since it lost), a clock behind held the drain to ``checkpointMaxDelay``."""

from __future__ import annotations

import copy
import datetime
from typing import Any

from gpuhealth.report import FaultClass
from pitcrew.api.gpunode import Phase
from pitcrew.api.vocabulary import CHECKPOINT_ANNOTATION
from pitcrew.core.convert import EPOCH
from support.lifecycle_data import T0
from support.shell_fakes import Shell, healthy_status, policy_object, version

POLICY = policy_object(safety={"drain": {"checkpointMaxDelay": "1h"}})
MINUTE = datetime.timedelta(minutes=1)


def trainer(checkpoint: datetime.datetime | None) -> dict[str, Any]:
    annotations = {CHECKPOINT_ANNOTATION: checkpoint.isoformat()} if checkpoint else {}
    return {
        "metadata": {
            "name": "trainer-0",
            "namespace": "ml",
            "uid": "uid-trainer-0",
            "resourceVersion": version(),
            "labels": {"pitcrew.dev/job": "llm"},
            "annotations": annotations,
            "ownerReferences": [{"kind": "Job", "name": "llm", "controller": True}],
        },
        "spec": {
            "nodeName": "n0",
            "containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
        },
        "status": {"phase": "Running"},
    }


def checkpoints(shell: Shell, at: datetime.datetime) -> None:
    """The trainer writes a new checkpoint time (its node's clock) into its pod."""
    pod = copy.deepcopy(shell.store.pods["ml/trainer-0"])
    pod["metadata"]["annotations"] = {CHECKPOINT_ANNOTATION: at.isoformat()}
    pod["metadata"]["resourceVersion"] = version()
    shell.store.put("pod", pod)


def suspect(first_seen: datetime.datetime | None) -> Shell:
    shell = Shell(nodes={"n0": healthy_status()}, policy=POLICY, now=T0)
    shell.store.clock = lambda: shell.now
    shell.store.put("pod", trainer(first_seen))
    shell.settle()
    shell.now += MINUTE
    shell.fail("n0", FaultClass.DEGRADED)
    shell.settle()
    assert shell.phase("n0") is Phase.SUSPECT
    return shell


def test_a_checkpoint_from_before_the_take_out_does_not_start_the_drain() -> None:
    # The node's clock runs 10 minutes ahead: its last checkpoint, taken before the
    # node was taken out, says T0 + 10 min.
    shell = suspect(T0 + 10 * MINUTE)
    assert shell.store.checkpoints_seen["ml/trainer-0"] == EPOCH
    shell.now += MINUTE
    shell.settle()
    assert shell.phase("n0") is Phase.SUSPECT
    # Its next checkpoint, seen now: the drain begins.
    shell.now += 4 * MINUTE
    checkpoints(shell, T0 + 16 * MINUTE)
    shell.settle()
    assert shell.phase("n0") is not Phase.SUSPECT


def test_a_new_checkpoint_from_a_clock_behind_starts_the_drain() -> None:
    # The node's clock runs an hour behind: its new checkpoint says T0 - 55 min.
    shell = suspect(None)
    shell.now += 5 * MINUTE
    checkpoints(shell, T0 - 55 * MINUTE)
    assert shell.store.checkpoints_seen["ml/trainer-0"] == shell.now
    shell.settle()
    assert shell.phase("n0") is not Phase.SUSPECT

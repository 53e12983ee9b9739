"""The shell around :func:`pitcrew.core.validation.plan`: ValidationRuns against the API.

Each step, for every unfinished run: reads the selected nodes from the
store, plans, then makes the cluster match the plan: the request annotation
``pitcrew.dev/validation-run`` on exactly the nodes the plan holds (the node
lifecycle does the cordon, drain-when-idle, probe and return to service),
the pair Jobs it starts, a failing probe report for each node it blames, and
the run's status. The run status is shared by server-side apply: the
operator owns everything but the pair results, which the pair probe owns.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any, cast

from kubernetes import client

from gpuhealth.report import CheckResult, CheckStatus, FaultClass, RecommendedAction
from pitcrew.api.gpunode import ChecksStatus, Phase
from pitcrew.api.meta import API_VERSION, GROUP, VERSION
from pitcrew.api.validationrun import (
    PairResult,
    RunPhase,
    ValidationRun,
    ValidationRunSpec,
    ValidationRunStatus,
)
from pitcrew.api.vocabulary import (
    OPERATOR_MANAGER,
    PAIR_LABEL,
    PROBE_MANAGER,
    RANK_LABEL,
    RUN_LABEL,
    VALIDATION_REQUEST,
    VALIDATION_SUITE,
    account_name,
)
from pitcrew.controller.settings import OperatorSettings, job_pods
from pitcrew.controller.store import Store
from pitcrew.core.convert import (
    gpu_capacity,
    gpu_model,
    matches,
    object_key,
    termination_message,
)
from pitcrew.core.port_types import Ref
from pitcrew.core.validation import (
    PAIR_NICS,
    PENDING,
    RUNNING,
    Candidate,
    RunPlan,
    pair_verdict,
    parse_pair_report,
    plan,
)
from pitcrew.kube import gpunodes, jobs, nodes
from pitcrew.kube.client import request, retrying
from pitcrew.kube.events import Recorder

logger = logging.getLogger(__name__)
IGNORED_KEPT = 4096
"""Pods remembered as ignored (so each is said once), at most."""


class Runs:
    def __init__(
        self, api: client.ApiClient, store: Store, settings: OperatorSettings, recorder: Recorder
    ) -> None:
        self.api, self.store, self.settings, self.recorder = api, store, settings, recorder
        self.custom = client.CustomObjectsApi(api)
        self._ignored: dict[str, str] = {}
        """Pods that carry a pair test's labels but are not its Job's, said once each."""
        self.sweep_pending = True
        """Sweep once after start (a run deleted while no operator led) and after each
        deletion."""

    def active(self) -> bool:
        return self.sweep_pending or any(
            (r.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            for r in self.store.runs.values()
        )

    def run_deleted(self) -> None:
        """A run went away: the next step releases the nodes it held (no scan of the
        fleet on every round to find out)."""
        self.sweep_pending = True

    def step(self, now: datetime.datetime) -> None:
        if self.sweep_pending:
            try:
                self.sweep()
                self.sweep_pending = False
            except Exception:
                logger.exception("releasing nodes of deleted ValidationRuns failed; retried")
        for run in list(self.store.runs.values()):
            try:
                self._step(run, now)
            except Exception:
                logger.exception(
                    "ValidationRun %s: step failed; retried on the next round",
                    run["metadata"]["name"],
                )

    def _candidates(self, spec: ValidationRunSpec) -> list[Candidate]:
        selector = spec.node_selector.model_dump(by_alias=True)
        found = []
        for name, node in self.store.nodes.items():
            labels = node["metadata"].get("labels") or {}
            if matches(selector, labels):
                status = self.store.status(name)
                found.append(
                    Candidate(
                        name=name,
                        phase=status.phase,
                        group=labels.get(spec.topology_key, ""),
                        probe=status.probe,
                        probe_job=status.probe_job,
                        validating_since=status.phase_since
                        if status.phase is Phase.VALIDATING
                        else None,
                    )
                )
        return found

    def _step(self, run: dict[str, Any], now: datetime.datetime) -> None:
        name = run["metadata"]["name"]
        spec = ValidationRunSpec.model_validate(run["spec"])
        status = ValidationRunStatus.model_validate(run.get("status") or {})
        if status.phase in (RunPhase.SUCCEEDED, RunPhase.FAILED):
            return
        status = self._collect_pairs(name, status)
        result = plan(spec=spec, status=status, candidates=self._candidates(spec), now=now)
        # Blame before release: a blamed node released first could be decided back
        # into service before its failing verdict lands.
        for node, message in result.blame.items():
            self._blame(node, message)
        self._requests(name, result, spec.suite.value)
        self._write(run, result.status)  # pair entries exist before their probes report
        for pair in result.start_pairs:
            self._start_pair(name, spec, pair.name, pair.attempt, pair.nodes)
        if result.status.phase is not status.phase:
            self.recorder.emit(
                Ref(ValidationRun.KIND, name, API_VERSION, run["metadata"].get("uid", "")),
                reason=f"Run{result.status.phase}",
                message=f"{len(result.status.nodes)} nodes, failed: "
                f"{', '.join(result.status.failed_nodes) or 'none'}",
                warning=result.status.phase is RunPhase.FAILED,
            )

    def sweep(self) -> None:
        """Release nodes held by a run that no longer exists (deleted mid-run): they
        would otherwise stay cordoned and held for ever."""
        for name, node in self.store.nodes.items():
            holder = (node["metadata"].get("annotations") or {}).get(VALIDATION_REQUEST)
            if holder and holder not in self.store.runs:
                logger.info("releasing %s: its ValidationRun %s is gone", name, holder)
                nodes.annotate(self.api, name, {VALIDATION_REQUEST: None, VALIDATION_SUITE: None})

    def _requests(self, run: str, result: RunPlan, suite: str) -> None:
        for name, node in self.store.nodes.items():
            holder = (node["metadata"].get("annotations") or {}).get(VALIDATION_REQUEST)
            if name in result.requested and holder != run:
                nodes.annotate(self.api, name, {VALIDATION_REQUEST: run, VALIDATION_SUITE: suite})
            elif name not in result.requested and holder == run:
                nodes.annotate(self.api, name, {VALIDATION_REQUEST: None, VALIDATION_SUITE: None})

    def _collect_pairs(self, run: str, status: ValidationRunStatus) -> ValidationRunStatus:
        """Judge each pair test whose rank-0 pod has finished, from the bus bandwidth it
        left in its termination message and the floor of the nodes' GPU model.

        Only the pod of the Job Pitcrew created for the pair counts (:meth:`_pairs_pod`):
        its labels and a termination message are what any pod in any namespace can
        carry, and a verdict read from one would pass a bad pair or blame good nodes."""
        if not any(p.result in (PENDING, RUNNING) for p in status.pairs):
            return status  # nothing to collect: no walk over every pod of the cluster
        found: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for candidate in self.store.pods.values():
            meta = candidate["metadata"]
            labels = meta.get("labels") or {}
            if meta.get("namespace") == self.settings.namespace and (
                labels.get(RUN_LABEL) == run[:63]
            ):
                key = (str(labels.get(PAIR_LABEL)), str(labels.get(RANK_LABEL)))
                found.setdefault(key, []).append(candidate)
        pairs = []
        for pair in status.pairs:
            ident = jobs.pair_ident(run, pair.name, pair.attempt)
            pod: dict[str, Any] | None = None
            if pair.result in (PENDING, RUNNING):
                pod = self._pairs_pod(found.get((ident, "0"), []), run=run, ident=ident, pair=pair)
            if pod is None:
                pairs.append(pair)
                continue
            message, phase = termination_message(pod), (pod.get("status") or {}).get("phase")
            if message:
                busbw, error = parse_pair_report(message)
                pairs.append(
                    pair_verdict(
                        pair, busbw_gbps=busbw, floor_gbps=self._floor(pair.nodes), error=error
                    )
                )
            elif phase == "Failed":
                reason = (pod.get("status") or {}).get("reason") or "pod failed"
                pairs.append(pair_verdict(pair, busbw_gbps=None, floor_gbps=None, error=reason))
            else:
                pairs.append(pair)
        return status.model_copy(update={"pairs": pairs})

    def _pairs_pod(
        self, pods: list[dict[str, Any]], *, run: str, ident: str, pair: PairResult
    ) -> dict[str, Any] | None:
        """The finished rank-0 pod of ``pair``'s Job, or None: a pod in the operator's
        namespace, on the pair's first node, controlled (by UID) by the Job Pitcrew
        created for this run, pair and attempt. Others are ignored, said once each."""
        for pod in pods:
            finished = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
            if not (finished or termination_message(pod)):
                continue
            why = self._not_the_pairs(pod, run=run, ident=ident, node=pair.nodes[0])
            if not why:
                return pod
            uid = str(pod["metadata"].get("uid") or object_key(pod))
            if uid not in self._ignored:
                if len(self._ignored) >= IGNORED_KEPT:
                    self._ignored.clear()
                self._ignored[uid] = why
                logger.warning(
                    "ValidationRun %s, pair %s: pod %s is not its pair test's (%s): ignored",
                    run,
                    pair.name,
                    object_key(pod),
                    why,
                )
        return None

    def _not_the_pairs(self, pod: dict[str, Any], *, run: str, ident: str, node: str) -> str:
        """Why ``pod`` is not the rank-0 pod of the Job Pitcrew made for the pair, or
        empty when it is."""
        meta = pod["metadata"]
        if (pod.get("spec") or {}).get("nodeName") != node:
            return f"it ran on {(pod.get('spec') or {}).get('nodeName') or 'no node'}, not {node}"
        owners: list[dict[str, Any]] = meta.get("ownerReferences") or []
        owner = next((o for o in owners if o.get("controller")), {})
        if owner.get("kind") != "Job" or not owner.get("name") or not owner.get("uid"):
            return "no Job controls it"
        namespace = self.settings.namespace
        try:
            job = request(
                self.api, "GET", f"/apis/batch/v1/namespaces/{namespace}/jobs/{owner['name']}"
            )
        except client.ApiException as error:
            if error.status == 404:
                return f"its Job {namespace}/{owner['name']} does not exist"
            raise
        job_meta = job.get("metadata") or {}
        labels = job_meta.get("labels") or {}
        if job_meta.get("uid") != owner["uid"]:
            return f"its controller is not the Job {namespace}/{owner['name']} (uid)"
        made = (labels.get(RUN_LABEL), labels.get(PAIR_LABEL), labels.get(RANK_LABEL))
        if made != (run[:63], ident, "0"):
            return f"its Job {namespace}/{owner['name']} is not this pair's rank 0"
        return ""

    def _floor(self, members: list[str]) -> float | None:
        """The per-NIC inter-node floor of the pair's GPU model (the lower of the two)."""
        models = [gpu_model(self.store.nodes.get(n, {})) for n in members]
        if any(m is None for m in models):
            return None
        return min(m.nccl_inter_floor_gbps_per_nic for m in models if m) * PAIR_NICS

    def _address(self, node: str) -> str:
        addresses = (self.store.nodes.get(node, {}).get("status") or {}).get("addresses") or []
        return next((a["address"] for a in addresses if a.get("type") == "InternalIP"), node)

    def _start_pair(
        self, run: str, spec: ValidationRunSpec, pair: str, attempt: int, members: list[str]
    ) -> None:
        for job in jobs.pair_jobs(
            run=run,
            pair=pair,
            attempt=attempt,
            nodes=members,
            master_address=self._address(members[0]),
            namespace=self.settings.namespace,
            image=self.settings.jobs.probe_image,
            gpus=gpu_capacity(self.store.nodes.get(members[0], {})),
            deadline_seconds=int(spec.timeout.total_seconds()),
            service_account=account_name("probe", self.settings.jobs.account_prefix),
            priority_class=self._priority_class(members[0]),
            resources=self.settings.jobs.probe_resources,
            pods=job_pods(self.settings.jobs),
        ):
            jobs.create(self.api, job)

    def _priority_class(self, node: str) -> str:
        """The probe PriorityClass of the node's policy: pair pods are as preemptible
        as probe pods."""
        matched = self.store.policies_of(node)
        policy = self.store.policy(matched[0]) if len(matched) == 1 else None
        return policy.spec.validation.priority_class_name if policy else ""

    def _blame(self, node: str, message: str) -> None:
        report = ChecksStatus(
            report_time=datetime.datetime.now(datetime.UTC),
            backend="pair",
            suite="nccl-pair",
            results=[
                CheckResult(
                    name="nccl-pair",
                    status=CheckStatus.FAIL,
                    fault_class=FaultClass.DEGRADED,
                    action=RecommendedAction.RESET_GPU,
                    message=message[:1024],
                )
            ],
            # Written as the report of the probe the node's validation waits for, so
            # the lifecycle counts it (a held node's probe passed; this verdict replaces it).
            job=self.store.status(node).probe_job,
        )
        written = gpunodes.apply_status(
            self.api,
            node=node,
            status={"probe": report.model_dump(mode="json", by_alias=True, exclude_none=True)},
            manager=PROBE_MANAGER,
        )
        self.store.put("gpunode", written)  # seen by the next decision, before the release

    def _write(self, run: dict[str, Any], status: ValidationRunStatus) -> None:
        body_status = status.model_dump(mode="json", by_alias=True, exclude_none=True)
        current = run.get("status") or {}
        if all(current.get(k) == v for k, v in body_status.items()):
            return
        written = retrying(self.custom.patch_cluster_custom_object_status)(
            GROUP,
            VERSION,
            ValidationRun.PLURAL,
            run["metadata"]["name"],
            {
                "apiVersion": API_VERSION,
                "kind": ValidationRun.KIND,
                "metadata": {"name": run["metadata"]["name"]},
                "status": body_status,
            },
            field_manager=OPERATOR_MANAGER,
            force=True,
            _content_type=gpunodes.APPLY,
        )
        self.store.put("run", cast(dict[str, Any], written))

"""The ``pitcrew`` command line.

Each subcommand is a thin shell over a module that does the work; the CLI only
parses arguments, prints, and maps known errors to exit codes (0 ok, 1 failed,
2 bad usage), so that scripts can rely on them and no traceback reaches a user
for an error we understand: one line, ``pitcrew COMMAND: what went wrong``. A
command that talks to a cluster (``status``, ``install``, ``operator``) asks it
its version first, so a kubeconfig it cannot use (exit 2) or an apiserver that
does not answer (exit 1) is such a line too, as is an error the apiserver
answers (403 from RBAC, 404 without the CRDs: exit 1).
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import yaml
from kubernetes import client
from rich.console import Console

from gpuhealth import GpuhealthError
from gpuhealth.arguments import Parser
from gpuhealth.distribution import version
from gpuhealth.models import get_model
from pitcrew.api import crdgen, docgen
from pitcrew.api.errors import PitcrewError
from pitcrew.api.meta import GROUP, VERSION, Duration
from pitcrew.api.vocabulary import DEFAULT_NAMESPACE
from pitcrew.cli import flags
from pitcrew.cli import status as fleet_status
from pitcrew.deploy import chart as chartgen
from pitcrew.kube.client import ClusterConfigError, answer_text, api_client, reach

DEFAULT_DIR = Path(".devcluster")
KUBECONFIG_HELP = "default: $KUBECONFIG; in a pod, its service account; else ~/.kube/config"
CRD_FOLDERS = [Path("crds"), Path("charts/pitcrew/crds")]


def _cluster(kubeconfig: str | None) -> client.ApiClient:
    """A client for a command that talks to the cluster, which has answered once."""
    api = api_client(kubeconfig)
    reach(api)
    return api


def _devcluster_up(args: argparse.Namespace) -> int:
    from pitcrew.dev import devcluster  # noqa: PLC0415 - development tooling, loaded on use

    state = devcluster.up(
        directory=args.dir,
        node_count=args.nodes,
        gpus_per_node=args.gpus_per_node,
        model=get_model(args.gpu_model),
        apiserver_port=args.port,
        timeout=args.timeout,
        real_nodes=args.real_nodes,
    )
    if args.with_pitcrew:
        from pitcrew.deploy import install  # noqa: PLC0415

        applied = install.install(api_client(state.kubeconfig), args.namespace)
        print(f"Pitcrew installed: {applied} objects (CRDs, RBAC, admission, policy gpu-fleet).")
        print("\nThree commands to a quarantined node:")
        for line in next_steps(state.kubeconfig, args.namespace):
            print(line)
    else:
        print(f"\nexport KUBECONFIG={state.kubeconfig}")
        print("kubectl get nodes -L nvidia.com/gpu.product       # see the simulated GPU nodes")
    print(f"pitcrew devcluster down --dir {args.dir}            # stop everything it started")
    return 0


def next_steps(kubeconfig: str, namespace: str) -> list[str]:
    """From an installed devcluster to a quarantined node: the README's three commands."""
    fault = '[{"type": "xid", "gpu": 0, "code": 79}]'
    return [
        f"pitcrew sim-agents --kubeconfig {kubeconfig} --interval 5s &",
        f"pitcrew operator --kubeconfig {kubeconfig} --namespace {namespace} &",
        f"kubectl --kubeconfig {kubeconfig} annotate node gpu-node-0003 "
        f"sim.pitcrew.dev/faults='{fault}'",
    ]


def _install(args: argparse.Namespace) -> int:
    from pitcrew.deploy import install  # noqa: PLC0415

    training = args.training_namespace or []
    if args.dry_run:
        sys.stdout.write(
            install.render(
                args.namespace,
                policy=not args.no_policy,
                crds_only=args.crds_only,
                training_namespaces=training,
            )
        )
        return 0
    if args.crds_only:
        names = install.install_crds(_cluster(args.kubeconfig), log=print)
        print(f"{len(names)} CRDs applied and served.")
        return 0
    applied = install.install(
        _cluster(args.kubeconfig),
        args.namespace,
        policy=not args.no_policy,
        training_namespaces=training,
        log=print,
    )
    print(
        f"{applied} objects applied. Run the operator (`pitcrew operator --namespace "
        f"{args.namespace}`) or the chart's workloads (docs/install.md)."
    )
    return 0


def _devcluster_build(args: argparse.Namespace) -> int:
    from pitcrew.dev.devcluster import build  # noqa: PLC0415

    binaries = build.ensure_built()
    print(f"devcluster binaries: {binaries.devcluster} {binaries.kwok}")
    print(f"helm: {build.ensure_helm()}")
    print(f"toxiproxy: {build.ensure_toxiproxy()}")
    return 0


def _devcluster_down(args: argparse.Namespace) -> int:
    from pitcrew.dev import devcluster  # noqa: PLC0415

    devcluster.down(directory=args.dir)
    return 0


def _devcluster_kubeconfig(args: argparse.Namespace) -> int:
    from pitcrew.dev import devcluster  # noqa: PLC0415

    print(devcluster.node_kubeconfig(directory=args.dir, node=args.node, out=args.out))
    return 0


def _devcluster_status(args: argparse.Namespace) -> int:
    from pitcrew.dev import devcluster  # noqa: PLC0415

    report = devcluster.status(directory=args.dir)
    print(json.dumps(report, indent=2))
    return 0 if report["running"] else 1


def _generated(
    args: argparse.Namespace,
    *,
    folders: list[Path],
    write_all: Callable[[Path], list[Path]],
    stale_files: Callable[[Path], list[Path]],
) -> int:
    """Write generated files, or with ``--check`` fail when they differ from the source."""
    folders = args.out or folders
    if args.check:
        stale = [path for folder in folders for path in stale_files(folder)]
        for path in stale:
            print(f"{path} is stale; run `pitcrew {args.command}`", file=sys.stderr)
        return 1 if stale else 0
    for folder in folders:
        for path in write_all(folder):
            print(f"wrote {path}")
    return 0


def _crds(args: argparse.Namespace) -> int:
    failed = _generated(
        args, folders=CRD_FOLDERS, write_all=crdgen.write_all, stale_files=crdgen.stale_files
    )
    if args.out:
        return failed
    reference = docgen.render()
    if args.check:
        if not docgen.FILE.exists() or docgen.FILE.read_text() != reference:
            print(f"{docgen.FILE} is stale; run `pitcrew crds`", file=sys.stderr)
            return 1
        return failed
    docgen.FILE.write_text(reference)
    print(f"wrote {docgen.FILE}")
    return failed


def _chart(args: argparse.Namespace) -> int:
    return _generated(
        args,
        folders=[chartgen.FOLDER],
        write_all=chartgen.write_all,
        stale_files=chartgen.stale_files,
    )


def _operator(args: argparse.Namespace) -> int:
    from pitcrew.controller import operator  # noqa: PLC0415 - kopf is only needed here

    try:
        settings = flags.settings_from(args)
    except flags.FlagError as error:
        print(f"pitcrew operator: {error}", file=sys.stderr)
        return 2
    _cluster(settings.kubeconfig)
    operator.run(settings)
    return 0


def _agent(args: argparse.Namespace) -> int:
    from pitcrew.node import agent  # noqa: PLC0415 - NVML and Prometheus only here

    agent.main(
        node=args.node,
        kubeconfig=args.kubeconfig,
        interval=args.interval,
        heartbeat=args.heartbeat,
        expected_gpus=args.expected_gpus,
        kernel_log=args.kernel_log,
        metrics_port=args.metrics_port,
        simulated=args.simulated,
    )
    return 0


def _sim_agents(args: argparse.Namespace) -> int:
    from prometheus_client import start_http_server  # noqa: PLC0415

    from pitcrew.dev.agents import AgentPods, SimAgents  # noqa: PLC0415

    if args.metrics_port:
        start_http_server(args.metrics_port)
    api = api_client(args.kubeconfig)
    pods = (
        AgentPods(api, namespace=args.agent_namespace, account=args.agent_account)
        if args.agent_account
        else None
    )
    SimAgents(
        api,
        interval=args.interval,
        heartbeat=args.heartbeat,
        probe_account=args.probe_account,
        agent_pods=pods,
        noise=args.noise,
        probe_seconds=args.probe_seconds,
    ).run()
    return 0


def _demo(args: argparse.Namespace) -> int:
    from pitcrew.dev.demo.runner import Demo, DemoOptions  # noqa: PLC0415

    options = DemoOptions(
        nodes=args.nodes,
        seed=args.seed,
        speed=args.speed,
        duration=args.duration,
        directory=args.dir,
        spares=args.spares,
        checkpoint_aware=not args.no_checkpoint_aware,
        straggler_at=args.straggler_at if args.straggler_at >= 0 else None,
        hang_at=args.hang_at if args.hang_at >= 0 else None,
    )
    args.dir.mkdir(parents=True, exist_ok=True)
    Demo(options, Console()).run()
    return 0


def _simulate(args: argparse.Namespace) -> int:
    from pitcrew.simulate import command  # noqa: PLC0415
    from pitcrew.simulate.errors import SimulationError, SimulationInputError  # noqa: PLC0415

    try:
        return command.main(args.argv)
    except SimulationError as error:
        print(f"pitcrew simulate: {error}", file=sys.stderr)
        return 2 if isinstance(error, SimulationInputError) else 1


def _status(args: argparse.Namespace) -> int:
    custom = client.CustomObjectsApi(_cluster(args.kubeconfig))

    def items(plural: str) -> list[dict[str, Any]]:
        found = cast(dict[str, Any], custom.list_cluster_custom_object(GROUP, VERSION, plural))
        return list(found["items"])

    report = fleet_status.build(
        policies=items("gpuhealthpolicies"),
        gpunodes=items("gpunodes"),
        now=datetime.datetime.now(datetime.UTC),
    )
    if args.output == "json":
        print(json.dumps(report, indent=2))
    elif args.output == "yaml":
        # The JSON document as YAML: the same values, whatever types built the report.
        sys.stdout.write(yaml.safe_dump(json.loads(json.dumps(report)), sort_keys=False))
    else:
        fleet_status.render(report, Console())
    return 0


def _probe_pair(args: argparse.Namespace) -> int:
    from pitcrew.node import probe  # noqa: PLC0415

    return probe.run_pair(run=args.run, pair=args.pair, rank=args.rank)


def _probe(args: argparse.Namespace) -> int:
    from pitcrew.node import probe  # noqa: PLC0415

    return probe.run(node=args.node, suite=args.suite, job=args.job, kubeconfig=args.kubeconfig)


Commands = Any  # argparse's private _SubParsersAction


def _add_devcluster(commands: Commands) -> None:
    cluster = commands.add_parser("devcluster", help="a local control plane with fake GPU nodes")
    cluster_commands = cluster.add_subparsers(dest="action", required=True)
    up = cluster_commands.add_parser("up", help="build if needed and start; returns when Ready")
    up.add_argument("--nodes", type=int, default=8)
    up.add_argument("--gpus-per-node", type=int, default=8)
    up.add_argument("--gpu-model", default="H100")
    up.add_argument(
        "--real-nodes",
        type=int,
        default=0,
        help="real kubelet nodes beside the simulated ones (root, cgroups, "
        "`make real-node-tools`: docs/architecture.md, Real nodes)",
    )
    up.add_argument("--port", type=int, default=None, help="kube-apiserver port (default: free)")
    up.add_argument("--timeout", type=float, default=180.0, help="seconds per component")
    up.add_argument(
        "--with-pitcrew",
        action="store_true",
        help="also `pitcrew install` into it (CRDs, RBAC, admission, the default policy)",
    )
    up.add_argument("--namespace", default=DEFAULT_NAMESPACE, help="for --with-pitcrew")
    up.set_defaults(handler=_devcluster_up)
    make = cluster_commands.add_parser("build", help="build the binaries (cached) and exit")
    make.set_defaults(handler=_devcluster_build)
    down = cluster_commands.add_parser("down", help="stop what `up` started, remove state")
    down.set_defaults(handler=_devcluster_down)
    state = cluster_commands.add_parser("status", help="which components are running")
    state.set_defaults(handler=_devcluster_status)
    node = cluster_commands.add_parser(
        "kubeconfig", help="a kubeconfig with a node's kubelet identity (system:node:NAME)"
    )
    node.add_argument("--node", required=True)
    node.add_argument("--out", type=Path, default=None, help="default: DIR/node-NAME.kubeconfig")
    node.set_defaults(handler=_devcluster_kubeconfig)
    for sub in (up, down, state, node):
        sub.add_argument("--dir", type=Path, default=DEFAULT_DIR)


def _add_operator(commands: Commands) -> None:
    operator = commands.add_parser(
        "operator",
        help="run the operator (kopf, leader election)",
        description="Run the operator. Every flag is a field of its settings "
        "(docs/configuration.md, Operator settings); durations are written like 15s or "
        "1h30m, and a bare number is seconds.",
    )
    flags.add_settings_flags(operator)
    operator.set_defaults(handler=_operator)


def _add_runtime(commands: Commands) -> None:
    _add_operator(commands)
    agent_cmd = commands.add_parser("agent", help="the node agent (one per GPU node)")
    agent_cmd.add_argument("--node", required=True, help="this node's name (downward API)")
    agent_cmd.add_argument("--kubeconfig", default=None, help=KUBECONFIG_HELP)
    until = "until the operator publishes the checks of the node's policy (spec.checks)"
    agent_cmd.add_argument(
        "--interval", type=Duration, default=Duration("30s"), help=f"sweep interval {until}"
    )
    agent_cmd.add_argument(
        "--heartbeat", type=Duration, default=Duration("5m"), help=f"heartbeat {until}"
    )
    agent_cmd.add_argument("--expected-gpus", type=int, default=None)
    agent_cmd.add_argument("--kernel-log", default="/dev/kmsg")
    agent_cmd.add_argument("--metrics-port", type=int, default=9400)
    agent_cmd.add_argument(
        "--simulated", action="store_true", help="sim backend instead of NVML (tests, no GPUs)"
    )
    agent_cmd.set_defaults(handler=_agent)

    sim = commands.add_parser("sim-agents", help="simulated agents for every simulated node")
    sim.add_argument("--kubeconfig", default=None, help=KUBECONFIG_HELP)
    sim.add_argument("--interval", type=Duration, default=Duration("30s"))
    sim.add_argument("--heartbeat", type=Duration, default=Duration("5m"))
    sim.add_argument("--metrics-port", type=int, default=0)
    sim.add_argument(
        "--noise",
        type=float,
        default=1.0,
        help="how hostile the simulated GPUs are: 1 the default noise, 0 exact readings, "
        "2 twice the drift and NVML failures (docs/faults.md)",
    )
    sim.add_argument(
        "--probe-seconds",
        type=float,
        default=1.0,
        help="how long a simulated probe pod runs before it reports (a node's "
        "sim.pitcrew.dev/probe-for annotation overrides it)",
    )
    sim.add_argument(
        "--probe-account",
        default=None,
        help="write each probe report with this ServiceAccount's token bound to the probe "
        "pod, as a real probe pod does (default: the --kubeconfig's credentials)",
    )
    sim.add_argument(
        "--agent-account",
        default="",
        help="write each node's status with this ServiceAccount's token, bound to the "
        "node's agent pod (sim.pitcrew.dev/agent=true) in --agent-namespace",
    )
    sim.add_argument("--agent-namespace", default=DEFAULT_NAMESPACE)
    sim.set_defaults(handler=_sim_agents)

    probe_cmd = commands.add_parser("probe", help="run a validation suite here (probe pod)")
    probe_cmd.add_argument("--node", required=True)
    probe_cmd.add_argument("--suite", default="standard")
    probe_cmd.add_argument("--job", default="", help="this probe's Job name (set by the operator)")
    probe_cmd.add_argument("--kubeconfig", default=None, help=KUBECONFIG_HELP)
    probe_cmd.set_defaults(handler=_probe)

    pair_cmd = commands.add_parser("probe-pair", help="one node's side of a pair all-reduce")
    pair_cmd.add_argument("--run", required=True)
    pair_cmd.add_argument("--pair", required=True)
    pair_cmd.add_argument("--rank", type=int, required=True)
    pair_cmd.set_defaults(handler=_probe_pair)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="pitcrew", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    _add_devcluster(commands)
    _add_runtime(commands)
    install_cmd = commands.add_parser(
        "install",
        help="CRDs, namespace, RBAC, admission policies and a default policy into a cluster "
        "(what the chart installs but the workloads; idempotent)",
    )
    install_cmd.add_argument("--kubeconfig", default=None, help=KUBECONFIG_HELP)
    install_cmd.add_argument("--namespace", default=DEFAULT_NAMESPACE)
    install_cmd.add_argument("--dry-run", action="store_true", help="print the objects, apply none")
    install_cmd.add_argument(
        "--no-policy", action="store_true", help="leave out the default GPUHealthPolicy"
    )
    install_cmd.add_argument(
        "--crds-only",
        action="store_true",
        help="apply the CRDs alone (the chart's pre-install and pre-upgrade hook runs this)",
    )
    install_cmd.add_argument(
        "--training-namespace",
        action="append",
        metavar="NAMESPACE",
        help="let the default ServiceAccount of this namespace's training jobs report "
        "progress on its own pod (repeatable; the chart's trainingJobs.namespaces)",
    )
    install_cmd.set_defaults(handler=_install)
    crds = commands.add_parser("crds", help="generate CRD YAML from the API models")
    crds.add_argument(
        "--out",
        type=Path,
        action="append",
        help="output folder, repeatable (default: crds/ and charts/pitcrew/crds/)",
    )
    crds.add_argument("--check", action="store_true", help="fail if the files are stale")
    crds.set_defaults(handler=_crds)
    demo = commands.add_parser(
        "demo",
        help="a local simulated GPU fleet, a training job and faults, with the real operator",
    )
    demo.add_argument("--nodes", type=int, default=32, help="simulated GPU nodes (8 GPUs each)")
    demo.add_argument("--seed", type=int, default=7, help="fault schedule seed")
    demo.add_argument(
        "--speed", type=float, default=1.0, help="fault rate multiplier (1: one a minute)"
    )
    demo.add_argument(
        "--duration", type=float, default=None, help="seconds; ends with a summary table"
    )
    demo.add_argument("--dir", type=Path, default=Path(".devcluster-demo"))
    demo.add_argument("--spares", type=int, default=2, help="hot spares the policy keeps")
    demo.add_argument(
        "--no-checkpoint-aware",
        action="store_true",
        help="drain suspect nodes at once instead of at the job's next checkpoint",
    )
    demo.add_argument(
        "--straggler-at",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="when a slow-gemm fault makes one of the job's nodes its straggler (negative: never)",
    )
    demo.add_argument(
        "--hang-at",
        type=float,
        default=90.0,
        metavar="SECONDS",
        help="when one rank of the job stops for good, its pods running (negative: never)",
    )
    demo.set_defaults(handler=_demo)
    # Its flags are the simulator's own (pitcrew.simulate.command), parsed there, so
    # that building this parser loads nothing from the simulation.
    simulate = commands.add_parser(
        "simulate",
        add_help=False,
        help="a fleet and its training job over weeks in simulated time, Pitcrew's "
        "core in the loop, against a baseline (--help for its flags)",
    )
    simulate.set_defaults(handler=_simulate)
    status = commands.add_parser(
        "status", help="fleet summary: pools, nodes out of service, remediations, goodput"
    )
    status.add_argument("--kubeconfig", help=KUBECONFIG_HELP)
    status.add_argument("-o", "--output", choices=["table", "json", "yaml"], default="table")
    status.set_defaults(handler=_status)
    chart = commands.add_parser(
        "chart", help="generate the chart's RBAC, admission policy and dashboards from code"
    )
    chart.add_argument(
        "--out", action="append", type=Path, help="chart folder (default: charts/pitcrew/)"
    )
    chart.add_argument("--check", action="store_true", help="fail if the files are stale")
    chart.set_defaults(handler=_chart)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command == "simulate":
        args.argv = rest
    elif rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if os.environ.get("PITCREW_DEBUG"):
        logging.getLogger("pitcrew").setLevel(logging.DEBUG)
    for noisy in ("kopf.objects", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    command = " ".join(["pitcrew", args.command, *([args.action] if "action" in args else [])])
    try:
        return int(args.handler(args))
    except (PitcrewError, GpuhealthError) as error:
        print(f"{command}: {error}", file=sys.stderr)
        return 2 if isinstance(error, ClusterConfigError) else 1
    except client.ApiException as error:
        logging.getLogger("pitcrew").debug("%s failed", command, exc_info=True)
        print(f"{command}: the apiserver answered {answer_text(error)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

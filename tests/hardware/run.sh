#!/usr/bin/env bash
# The hardware check: gpuhealth on a machine with NVIDIA GPUs, against the model's spec.
#
# Usage, from the repository root (any folder works):
#   bash tests/hardware/run.sh [--sweeps N] [--skip-active] [--wheels DIR] [--timeout SECONDS] [--reset]
#   bash tests/hardware/run.sh --sim H200   # a dry run on simulated GPUs: measures nothing
#
# Prints the machine (nvidia-smi -L, driver), then runs, each as its own process:
#   1. the NVML backend's sweep N times (default 100): p50, max and first sweep
#      time, and what NVML did not report or failed to read here;
#   2. gpuhealth check --suite full --json: the report, its exit code, its time;
#   3. the active probes one by one (bf16 GEMM, HBM copy, host-to-device copy,
#      all-reduce), per GPU, unrounded;
#   4. with --reset only (as root, GPU 0 idle: it is skipped while any process
#      uses it): nvidia-smi --gpu-reset -i 0 beside the agent's NVML backend,
#      holding the GPUs (expected refused, in use), then released as the agent
#      releases them for a reset rung (expected done), then NVML opened again;
# and prints a table: figure, measured, the GPU model's data-sheet spec and
# floor (healthchecks/gpuhealth/models.py), the ratios. Files go to
# ${OUT:-./hardware-out}: machine.txt, sweep.json, report.json, check.json,
# probes.json, reset.json (--reset), table.txt, and figures.jsonl (every figure on one JSON line).
#
# Python: $PYTHON if set, else the checkout's .venv, else python3: the first
# that imports pydantic, pynvml (nvidia-ml-py) and torch (torch not with
# --skip-active). gpuhealth runs from this checkout (healthchecks/ goes on
# PYTHONPATH), so nothing of the project needs installing. --wheels DIR first
# installs the wheels in DIR (no index, no dependencies) into a temporary folder
# for $PYTHON or python3: for a machine with no network whose Python lacks one.
#
# Exit: 0 every stage left its file (an unhealthy verdict is a finding, still 0);
# 1 a stage failed (the summary says which); 2 the check cannot start here (no
# NVIDIA driver, NVML does not start, a module is missing): one line on stderr.
# NVIDIA_SMI names the nvidia-smi to use (default: the one on PATH). --sim MODEL
# runs every stage on one of gpuhealth's simulated GPUs instead, with no driver:
# it checks this script and the summary, not the hardware.
set -euo pipefail

die() {
    echo "hardware check: $*" >&2
    exit 2
}

sweeps=100
skip_active=0
wheels=""
stage_timeout=300
sim=""
reset=0
while (($#)); do
    case $1 in
        --sweeps) sweeps=${2:?--sweeps needs a number}; shift 2 ;;
        --skip-active) skip_active=1; shift ;;
        --wheels) wheels=${2:?--wheels needs a folder}; shift 2 ;;
        --timeout) stage_timeout=${2:?--timeout needs seconds}; shift 2 ;;
        --sim) sim=${2:?--sim needs a GPU model}; shift 2 ;;
        --reset) reset=1; shift ;;
        -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
[[ $sweeps =~ ^[1-9][0-9]*$ ]] || die "--sweeps takes a positive whole number, not '$sweeps'"
[[ $stage_timeout =~ ^[1-9][0-9]*$ ]] || die "--timeout takes whole seconds, not '$stage_timeout'"

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
nvidia_smi=${NVIDIA_SMI:-nvidia-smi}

# 1. A driver, before anything is written.
have_smi=0
command -v "$nvidia_smi" >/dev/null 2>&1 && have_smi=1
libraries=$(ldconfig -p 2>/dev/null || true)
if [[ -z $sim ]] && ((!have_smi)) && [[ $libraries != *libnvidia-ml.so.1* ]]; then
    die "no NVIDIA driver on this machine (no nvidia-smi, no libnvidia-ml.so.1); run this on a machine with NVIDIA GPUs"
fi

# 2. A Python that has what the stages import.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
extra_path=""
if [[ -n $wheels ]]; then
    wheel_python=${PYTHON:-python3}
    shopt -s nullglob
    found=("$wheels"/*.whl)
    shopt -u nullglob
    ((${#found[@]})) || die "--wheels $wheels: no .whl files there"
    "$wheel_python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --target "$scratch/site" "${found[@]}" >"$scratch/pip.log" 2>&1 ||
        die "cannot install the wheels in $wheels with $wheel_python: $(tail -n 1 "$scratch/pip.log")"
    extra_path="$scratch/site"
    candidates=("$wheel_python")
elif [[ -n ${PYTHON:-} ]]; then
    candidates=("$PYTHON")
else
    candidates=()
    [[ -x $root/.venv/bin/python ]] && candidates+=("$root/.venv/bin/python")
    candidates+=(python3)
fi
export PYTHONPATH="$root/healthchecks${extra_path:+:$extra_path}${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

needed=(pydantic)
[[ -n $sim ]] || needed+=(pynvml)
((skip_active)) || [[ -n $sim ]] || needed+=(torch)
# Prints nothing when this Python has all it needs, else what is wrong with it.
lacks='
import importlib, importlib.util, sys
if sys.version_info < (3, 11):
    print(f"is Python {sys.version.split()[0]}; gpuhealth needs 3.11 or later")
    raise SystemExit
names = {"pynvml": "nvidia-ml-py", "torch": "torch (the active extra)"}
missing = []
for module in sys.argv[1:]:
    try:
        if module == "torch":  # importing it takes seconds; the probes say if it is broken
            assert importlib.util.find_spec(module) is not None
        else:
            importlib.import_module(module)
    except Exception:
        missing.append(names.get(module, module))
if missing:
    print("lacks " + ", ".join(missing))
'
python=""
reasons=()
for candidate in "${candidates[@]}"; do
    if ! missing=$("$candidate" -c "$lacks" "${needed[@]}" 2>/dev/null); then
        reasons+=("$candidate does not run")
    elif [[ -z $missing ]]; then
        python=$candidate
        break
    else
        reasons+=("$candidate $missing")
    fi
done
if [[ -z $python ]]; then
    reason=$(printf '%s; ' "${reasons[@]}")
    hint="install what is missing (pip install -e '.[active]'), set PYTHON to another Python, or pass --wheels DIR"
    ((skip_active)) || hint+=", or --skip-active to leave the probes out"
    die "no Python here has what the check needs: ${reason%; }; $hint"
fi
if [[ -n $sim ]]; then
    driver="none: simulated $sim GPU (a dry run, nothing is measured)"
elif ! driver=$("$python" -c '
import pynvml
try:
    pynvml.nvmlInit()
    version = pynvml.nvmlSystemGetDriverVersion()
    print(version.decode() if isinstance(version, bytes) else version)
except pynvml.NVMLError as error:
    print(error)
    raise SystemExit(1)
' 2>&1); then
    die "NVML does not start with $python: ${driver##*$'\n'}"
fi

# 3. The machine, then the stages; each stage's failure is recorded, not fatal.
out=${OUT:-./hardware-out}
mkdir -p "$out"
limit=()
command -v timeout >/dev/null 2>&1 && limit=(timeout --kill-after=15)
{
    echo "date:   $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "host:   $(hostname 2>/dev/null || uname -n)"
    echo "driver: $driver"
    echo "python: $python ($("$python" -c 'import sys; print(sys.version.split()[0])'))"
    if [[ -n $sim ]]; then
        :
    elif ((have_smi)); then
        "$nvidia_smi" -L || echo "nvidia-smi -L failed"
        "$nvidia_smi" --format=csv --query-gpu=index,name,memory.total,pcie.link.gen.max,pcie.link.width.max,clocks.max.sm,power.limit,persistence_mode ||
            echo "nvidia-smi --query-gpu failed"
    else
        echo "nvidia-smi: not on PATH (libnvidia-ml.so.1 is)"
    fi
} 2>&1 | tee "$out/machine.txt"

measure=("$python" "$root/tests/hardware/measure.py")
failed=()
stage() {
    local name=$1 seconds=$2 rc=0
    shift 2
    echo
    echo "== $name"
    ${limit[@]+"${limit[@]}" "$seconds"} "${measure[@]}" "$@" || rc=$?
    if ((rc == 124)); then
        failed+=("$name (timed out after $seconds s)")
    elif ((rc != 0)); then
        failed+=("$name (exit $rc)")
    fi
}
suite=full
((skip_active)) && suite=passive
simulated=()
checked=()
if [[ -n $sim ]]; then
    simulated=(--sim "$sim" --gpus 1)
    checked=(-- --backend sim --gpu-model "$sim" --gpus 1)
fi
stage sweep "$stage_timeout" sweep --out "$out" --sweeps "$sweeps" ${simulated[@]+"${simulated[@]}"}
stage "gpuhealth check" "$((stage_timeout + 30))" check --out "$out" --suite "$suite" \
    --timeout "$stage_timeout" ${checked[@]+"${checked[@]}"}
((skip_active)) || stage probes "$stage_timeout" probes --out "$out" ${simulated[@]+"${simulated[@]}"}
if ((reset)) && [[ -z $sim ]]; then
    stage reset "$stage_timeout" reset --out "$out" --nvidia-smi "$nvidia_smi"
fi

echo
echo "== figures (also $out/table.txt; one JSON line in $out/figures.jsonl)"
summary=0
without=()
((skip_active)) && without=(--without-probes)
"${measure[@]}" summarize --out "$out" ${without[@]+"${without[@]}"} || summary=$?
((summary == 0)) || failed+=("summary (exit $summary)")
if ((${#failed[@]})); then
    reason=$(printf '%s; ' "${failed[@]}")
    echo "hardware check: incomplete: ${reason%; }; see $out" >&2
    exit 1
fi

#!/usr/bin/env bash
# What a user gets from `pip install <distribution>` with no extras, checked before
# the tests: the wheel built from this tree, installed into a fresh venv with its
# runtime dependencies only, must run every production entry point and import every
# production module. A runtime import of a library that only an extra or the dev
# tools install fails here, instead of in the operator's pod at start. The wheel
# must also carry LICENSE and NOTICE.
#
# Skipped: pitcrew.dev (development tooling, never loaded by a production process)
# and the modules in EXTRAS, which document the extra they need; each of those must
# refuse to import with a line that says what to install.
#
#   scripts/check-runtime.sh              # python3 builds the venv
#   PYTHON=python3.12 scripts/check-runtime.sh
set -euo pipefail

PYTHON=${PYTHON:-python3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# module, and what its ImportError must say when the extra is missing
# (DIST is replaced by the distribution's name).
EXTRAS=(
    "pitcrew.client.lightning|pip install 'DIST[lightning]'"
    "pitcrew.client.hf|pip install 'DIST[hf]'"
    "pitcrew.client.distributed|pip install torch"
)

fail() {
    echo "check-runtime: $*" >&2
    exit 1
}

dist=$("$PYTHON" -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["name"])' \
    "$ROOT/pyproject.toml")

# The files git knows (tracked, and new ones not ignored), copied: the build sees
# neither build/ leftovers nor egg-info of the working tree, and writes nothing there.
echo "check-runtime: building the $dist wheel"
mkdir "$WORK/src"
git -C "$ROOT" ls-files -z --cached --others --exclude-standard |
    (cd "$ROOT" && "$PYTHON" -c '
import os, shutil, sys
for name in sys.stdin.buffer.read().split(b"\0"):
    path = os.fsdecode(name)
    if path and os.path.isfile(path):
        target = os.path.join(sys.argv[1], path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(path, target)
' "$WORK/src")

"$PYTHON" -m venv "$WORK/venv"
BIN=$WORK/venv/bin
"$BIN/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
"$BIN/python" -m pip wheel --quiet --disable-pip-version-check --no-deps \
    --wheel-dir "$WORK/dist" "$WORK/src"
wheel=$(ls "$WORK"/dist/*.whl)
"$BIN/python" -c '
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
missing = [f for f in ("LICENSE", "NOTICE") if not any(n.endswith(".dist-info/licenses/" + f) for n in names)]
sys.exit(f"check-runtime: the wheel lacks {missing}" if missing else 0)
' "$wheel"
echo "check-runtime: installing $(basename "$wheel") without extras into a fresh venv"
"$BIN/python" -m pip install --quiet --disable-pip-version-check "$wheel"

cd "$WORK" # away from the source tree: only the installed package can be imported

failures=0
run() {
    local out
    if ! out=$("$@" 2>&1); then
        printf '%s\n' "$out" | tail -n 5 >&2
        echo "check-runtime: failed: ${*#"$BIN/"}" >&2
        failures=$((failures + 1))
    fi
}

run "$BIN/pitcrew" --version
run "$BIN/gpuhealth" --version
for command in operator agent probe probe-pair install status simulate crds chart; do
    run "$BIN/pitcrew" "$command" --help
done
for command in check parse slurm; do
    run "$BIN/gpuhealth" "$command" --help
done
run "$BIN/gpuhealth" check --backend sim
run "$BIN/pitcrew" install --dry-run

# Past --help, up to the cluster: each command loads its handler's modules, then
# refuses a kubeconfig that is not there with its one line and exit 2.
for command in operator status install; do
    code=0
    out=$("$BIN/pitcrew" "$command" --kubeconfig "$WORK/no-kubeconfig" 2>&1) || code=$?
    if [ "$code" != 2 ]; then
        printf '%s\n' "$out" | tail -n 5 >&2
        echo "check-runtime: failed: pitcrew $command --kubeconfig MISSING exited $code, not 2" >&2
        failures=$((failures + 1))
    fi
done

echo "check-runtime: importing every production module"
printf '%s\n' "${EXTRAS[@]}" | "$BIN/python" -c '
import importlib, pkgutil, sys

dist = sys.argv[1]
needs = dict(line.split("|", 1) for line in sys.stdin.read().splitlines() if line)
failed = []


def production(path, prefix):
    """Every module under path but pitcrew.dev and the __main__ scripts, imported."""
    for info in pkgutil.iter_modules(path, prefix):
        name = info.name
        if name == "pitcrew.dev" or name.endswith(".__main__"):
            continue
        said = needs.pop(name, None)
        try:
            module = importlib.import_module(name)
        except ImportError as error:
            if said is None:
                failed.append(f"{name}: {type(error).__name__}: {error}")
            elif said.replace("DIST", dist) not in str(error):
                failed.append(f"{name} needs an extra but its error does not say {said!r}: {error}")
            continue
        except Exception as error:
            failed.append(f"{name}: {type(error).__name__}: {error}")
            continue
        if said is not None:
            failed.append(f"{name} imports without its extra: take it out of EXTRAS")
        if info.ispkg:
            production(module.__path__, name + ".")


for package in ("pitcrew", "gpuhealth"):
    production(importlib.import_module(package).__path__, package + ".")
failed += [f"{name} is in EXTRAS but not in the package" for name in needs]
for line in failed:
    print(f"check-runtime: {line}", file=sys.stderr)
sys.exit(1 if failed else 0)
' "$dist" || failures=$((failures + 1))

[ "$failures" = 0 ] || fail "$failures check(s) failed: $dist does not run with its runtime dependencies alone"

echo "check-runtime: $dist installs and runs without extras"

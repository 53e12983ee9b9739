# The two commands of the README: `make demo` and `make test`.
# Everything else here is what they need on a fresh machine.

VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test lint unit e2e chaos devcluster-build prometheus slurm slurm-trixie images images-check image-tools operator-image real-node-tools clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

demo: $(VENV)/.installed
	$(BIN)/pitcrew demo

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/pitcrew crds --check
	$(BIN)/pitcrew chart --check

# The tests run a real Prometheus and promtool: Debian's `prometheus` package.
prometheus:
	@command -v prometheus >/dev/null && command -v promtool >/dev/null || { \
	  echo "installing Prometheus and promtool (Debian package prometheus)"; \
	  $(SUDO) apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; }

# The Slurm tests run real slurmctld, slurmd and munged: Debian's Slurm 22.05 packages.
# The daemons are in /usr/sbin, off a normal user's PATH. On a host that runs systemd the
# munge package starts and enables munge.service; the tests start a munged of their own,
# so a munge installed here is stopped and disabled again. (slurmd and slurmctld start
# only with an /etc/slurm/slurm.conf, which the packages do not ship. Without systemd,
# in a container, invoke-rc.d starts nothing and the postinst scripts carry on.)
slurm:
	@export PATH="$$PATH:/usr/sbin:/sbin"; \
	command -v slurmctld >/dev/null && command -v slurmd >/dev/null && \
	  command -v scontrol >/dev/null && command -v munged >/dev/null || { \
	  had_munge=$$(command -v munged); \
	  echo "installing Slurm and munge (Debian packages slurmctld slurmd slurm-client munge)"; \
	  $(SUDO) apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    slurmctld slurmd slurm-client munge && \
	  if [ -z "$$had_munge" ] && [ -d /run/systemd/system ]; then \
	    $(SUDO) systemctl disable --now munge.service || true; fi; }

# Slurm 23.02 and later are read with `scontrol --json` (22.05's scontrol has none): the
# tests run Debian trixie's Slurm 24.11 and munge from a root file system of their own,
# unpacked by mmdebstrap (no daemon, no container runtime), in a chroot
# (tests/support/slurmcluster.py). About 180 MB, a minute on a fast mirror, once.
SLURM_TRIXIE ?= $(HOME)/.cache/pitcrew/slurm-trixie
slurm-trixie:
	@test -x $(SLURM_TRIXIE)/usr/sbin/slurmctld || { \
	  command -v mmdebstrap >/dev/null || { $(SUDO) apt-get update -qq && \
	    $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap; }; \
	  echo "unpacking Debian trixie's Slurm and munge into $(SLURM_TRIXIE)"; \
	  rm -rf $(SLURM_TRIXIE).tmp && mkdir -p $$(dirname $(SLURM_TRIXIE)) && \
	  $(SUDO) mmdebstrap --variant=apt --include=slurmctld,slurmd,slurm-client,munge \
	    trixie $(SLURM_TRIXIE).tmp http://deb.debian.org/debian && \
	  mv $(SLURM_TRIXIE).tmp $(SLURM_TRIXIE); }

# The images are built without a container daemon and without pulling from a registry:
# mmdebstrap makes a Debian base, podman builds the Dockerfile on it (chroot isolation)
# and writes OCI archives and SBOMs to dist/ (scripts/build-images.sh). runc runs them:
# the crun that bookworm's podman prefers refuses hosts with cgroup v1 and v2 mounted at once.
image-tools:
	@command -v mmdebstrap >/dev/null && command -v podman >/dev/null && \
	  command -v runc >/dev/null && command -v newuidmap >/dev/null || { \
	  echo "installing image tools (Debian packages mmdebstrap podman runc uidmap)"; \
	  $(SUDO) apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    mmdebstrap podman runc uidmap; }

# A devcluster's real kubelet nodes (`pitcrew devcluster up --real-nodes N`,
# tests/e2e/realnode): Debian's containerd (with ctr) and runc, catatonit (the
# sandbox image's one file), the CNI plugins and iptables. The kubelet is the
# devcluster binary's own. On a host that runs systemd the containerd package starts
# and enables containerd.service; each real node runs a containerd of its own, so a
# containerd installed here is stopped and disabled again.
real-node-tools:
	@command -v containerd >/dev/null && command -v ctr >/dev/null && command -v runc >/dev/null && \
	  command -v catatonit >/dev/null && command -v iptables >/dev/null && \
	  test -x /usr/lib/cni/bridge || { \
	  had_containerd=$$(command -v containerd); \
	  echo "installing real-node tools (Debian packages containerd runc catatonit containernetworking-plugins iptables)"; \
	  $(SUDO) apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    containerd runc catatonit containernetworking-plugins iptables && \
	  if [ -z "$$had_containerd" ] && [ -d /run/systemd/system ]; then \
	    $(SUDO) systemctl disable --now containerd.service || true; fi; }

images: image-tools
	scripts/build-images.sh

images-check: image-tools
	scripts/check-images.sh

# What CI builds and runs before the tests: the operator/agent image, as user 65532
# (`pitcrew --version`, `pitcrew operator --help`); tests/e2e/images then runs its
# operator against the devcluster. Not the probe image: its 3 GB of CUDA wheels take
# minutes to build and save (docs/benchmarks.md, Images); `make images` builds it.
operator-image: image-tools
	IMAGES=pitcrew scripts/build-images.sh
	scripts/check-images.sh

devcluster-build: $(VENV)/.installed
	$(BIN)/pitcrew devcluster build

unit: $(VENV)/.installed
	$(BIN)/pytest tests/unit

# The wheel in a fresh venv with its runtime dependencies only (no extras, no dev
# tools): every production command runs and every production module imports there.
.PHONY: runtime-check
runtime-check:
	scripts/check-runtime.sh

e2e: operator-image devcluster-build real-node-tools prometheus slurm slurm-trixie
	$(BIN)/pytest tests/e2e

# The chaos suite runs last, in a pytest session (and devcluster) of its own: it
# leaves the machine loaded for minutes, and no timing-sensitive test may follow it.
CHAOS_SECONDS ?= 60
chaos: devcluster-build
	PITCREW_CHAOS_SECONDS=$(CHAOS_SECONDS) $(BIN)/pytest tests/e2e/chaos

test: lint runtime-check operator-image devcluster-build real-node-tools prometheus slurm slurm-trixie
	$(BIN)/pytest
	$(MAKE) chaos

clean:
	-$(BIN)/pitcrew devcluster down
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache

# syntax=docker/dockerfile:1
#
# Two images from one file:
#   docker build -t pitcrew .                       operator and agent (default target)
#   docker build --target probe -t pitcrew-probe .  validation probes: PyTorch, CUDA, NCCL
#
# The runtime image holds a virtual environment with Pitcrew and its runtime
# dependencies only, runs as an unprivileged user, and has one entry point,
# `pitcrew`, whose subcommands are the operator (`pitcrew operator`) and the
# node agent (`pitcrew agent`).
#
# Both images start from PYTHON_IMAGE: any image with Python >= 3.11 as `python3`.
# `make images` builds a Debian bookworm base with mmdebstrap and passes it here,
# so that nothing is pulled from a registry (scripts/build-images.sh). With
# SOURCE_DATE_EPOCH set, pip writes hash-based .pyc files, whose validity does not
# depend on file times, so a build that clamps those times stays reproducible.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG SOURCE_DATE_EPOCH
RUN python3 -m venv /opt/pitcrew
# The dependencies as wheels, keyed on pyproject.toml alone: a change to the
# sources builds Pitcrew's own wheel again and downloads nothing else.
COPY pyproject.toml /src/
RUN python3 -c 'import tomllib; print("\n".join(tomllib.load(open("/src/pyproject.toml", "rb"))["project"]["dependencies"]))' > /src/requirements.txt \
 && /opt/pitcrew/bin/pip wheel --no-cache-dir --wheel-dir /wheels -r /src/requirements.txt
COPY README.md LICENSE NOTICE /src/
COPY operator /src/operator
COPY healthchecks /src/healthchecks
RUN /opt/pitcrew/bin/pip wheel --no-cache-dir --no-deps --wheel-dir /wheels/own /src \
 && /opt/pitcrew/bin/pip install --no-cache-dir --no-index --find-links /wheels /wheels/own/*.whl

# The probe's PyTorch. PyPI's Linux x86_64 wheels are CUDA builds that bring the
# CUDA runtime libraries and NCCL as nvidia-* wheels, so this image needs only the
# host's NVIDIA driver. TORCH_INDEX_URL picks another build, such as
# https://download.pytorch.org/whl/cu126 or a CPU-only one (.../whl/cpu);
# TORCH_VERSION pins a release. nccl-tests is not in this image: the all-reduce
# probe runs on torch.distributed with NCCL (gpuhealth.active.torch_probes), and
# prefers all_reduce_perf where an image built from this one puts it on PATH.
FROM ${PYTHON_IMAGE} AS probe
# RDMA's user-space libraries: without them NCCL has no InfiniBand or RoCE transport
# and falls back to TCP sockets between nodes.
RUN apt-get update \
 && apt-get install -y --no-install-recommends libibverbs1 ibverbs-providers librdmacm1 \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log
ARG SOURCE_DATE_EPOCH
ARG TORCH_INDEX_URL=
ARG TORCH_VERSION=
RUN python3 -m venv /opt/pitcrew \
 && /opt/pitcrew/bin/pip install --no-cache-dir ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "torch${TORCH_VERSION:+==$TORCH_VERSION}"
# The operator image's wheels, so both images hold the same versions. (Copied rather
# than bind-mounted: buildah 1.28 mounts an empty directory when the stage is cached.)
COPY --from=build /wheels /tmp/wheels
RUN /opt/pitcrew/bin/pip install --no-cache-dir --no-index --find-links /tmp/wheels /tmp/wheels/own/*.whl \
 && rm -rf /tmp/wheels
ENV PATH=/opt/pitcrew/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
ENTRYPOINT ["pitcrew"]
CMD ["probe", "--help"]

FROM ${PYTHON_IMAGE} AS pitcrew
COPY --from=build /opt/pitcrew /opt/pitcrew
ENV PATH=/opt/pitcrew/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
ENTRYPOINT ["pitcrew"]
CMD ["operator"]

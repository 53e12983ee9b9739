# syntax=docker/dockerfile:1
#
# Two images from one file:
#   docker build -t pitcrew .                      operator and agent (default target)
#   docker build --target probe -t pitcrew-probe . validation probes: CUDA, PyTorch, nccl-tests
#
# The runtime image holds a virtual environment with Pitcrew and its runtime
# dependencies only, runs as an unprivileged user, and has one entry point,
# `pitcrew`, whose subcommands are the operator (`pitcrew operator`) and the
# node agent (`pitcrew agent`).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
# NVIDIA's PyTorch container: CUDA, cuDNN, NCCL and a matching torch build.
ARG CUDA_IMAGE=nvcr.io/nvidia/pytorch:24.10-py3
ARG NCCL_TESTS_VERSION=v2.13.11

FROM ${PYTHON_IMAGE} AS build
RUN python -m venv /opt/pitcrew
COPY pyproject.toml README.md /src/
COPY operator /src/operator
COPY healthchecks /src/healthchecks
RUN /opt/pitcrew/bin/pip install --no-cache-dir /src

FROM ${CUDA_IMAGE} AS nccl-tests
ARG NCCL_TESTS_VERSION
RUN git clone --depth 1 --branch ${NCCL_TESTS_VERSION} https://github.com/NVIDIA/nccl-tests /nccl-tests \
 && make -C /nccl-tests -j"$(nproc)" MPI=0 CUDA_HOME=/usr/local/cuda NCCL_HOME=/usr

FROM ${CUDA_IMAGE} AS probe
COPY --from=nccl-tests /nccl-tests/build/all_reduce_perf /usr/local/bin/
COPY pyproject.toml README.md /src/
COPY operator /src/operator
COPY healthchecks /src/healthchecks
# torch comes with the base image; Pitcrew adds only its own runtime dependencies.
RUN pip install --no-cache-dir /src && rm -rf /src
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

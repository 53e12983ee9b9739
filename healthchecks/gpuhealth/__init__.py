"""gpuhealth: node-local GPU health checks, independent of Kubernetes."""

__version__ = "0.1.0"

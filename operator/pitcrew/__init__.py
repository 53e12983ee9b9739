"""Pitcrew: a Kubernetes operator that keeps GPU training fleets healthy."""

__version__ = "0.1.0"

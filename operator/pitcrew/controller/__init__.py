"""The operator's shell: kopf wiring, the round loop, the executor, the policy
status writer, the cache, metrics, health and leader election.

It turns watch events into calls of the pure core and the core's actions into
API calls; its collaborators (cluster writer, remediators, clock) are injected
so each piece is unit-tested with fakes.
"""

"""The pure core: every decision and every sum, as functions of plain data.

Nothing here does I/O or reads a clock (time is a parameter), so the node
lifecycle, the circuit breaker, the fleet arithmetic, the validation planner
and the goodput ledgers are unit- and property-tested without a cluster, and
the goodput simulator runs the same functions the operator runs.
"""

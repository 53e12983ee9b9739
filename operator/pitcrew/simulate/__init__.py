"""``pitcrew simulate``: a fleet and its training job in simulated time, Pitcrew's own
pure core in the loop (docs/goodput.md, "The simulator")."""

"""What runs on a GPU node: the agent (passive checks on a loop) and the probe
(active suites and pair all-reduce in a Job)."""

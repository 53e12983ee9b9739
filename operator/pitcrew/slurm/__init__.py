"""Talking to Slurm with its own tools (``scontrol``, ``squeue``), never its protocol."""

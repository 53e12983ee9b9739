"""Development tooling: the dev cluster launcher, simulated agents and the demo.

No production entry point imports this package (a unit test asserts it for
``pitcrew operator``): the CLI loads it only for ``devcluster``, ``sim-agents``
and ``demo``, so an operator pod never loads the dev cluster's PKI or Go build
code.
"""

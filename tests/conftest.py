"""Registers the shared fixtures (:mod:`support.fixtures`) for every test folder.

``pytest_plugins`` is only honoured in a conftest that pytest reads before it
collects, which this one always is, whichever folder or file is run.
"""

pytest_plugins = ["support.fixtures"]

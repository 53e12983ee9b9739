"""What the tests share: fakes and data builders for the unit tests, the devcluster's
fixtures and helpers for the end-to-end tests.

A package, imported as ``support`` (``tests`` is on pytest's ``pythonpath``), so that
its modules cannot shadow an installed one of the same name (``toxiproxy``,
``chaos``). :mod:`support.fixtures` is a pytest plugin, registered once in
``tests/conftest.py``.
"""

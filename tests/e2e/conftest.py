"""The end-to-end tests: each is marked ``e2e``; their fixtures (the devcluster,
Pitcrew running on it, fleets) are in :mod:`support.fixtures`."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)

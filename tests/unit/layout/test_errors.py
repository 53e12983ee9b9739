"""One error hierarchy per package: the command lines catch its root and print the
message, so an error class outside it reaches a person as a traceback.

Every public exception class defined in ``pitcrew`` derives from
:class:`pitcrew.api.errors.PitcrewError`, every one in ``gpuhealth`` from
:class:`gpuhealth.errors.GpuhealthError`. Private ones (``_RetryableError``) are
exempt: they are caught inside their module and never leave it. ``pitcrew.dev``
(the development tools) is checked with the tools.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Iterator
from types import ModuleType

import pytest

import gpuhealth
import pitcrew
from gpuhealth.backends.sim import SimNvmlError
from gpuhealth.errors import GpuhealthError
from pitcrew.api.errors import PitcrewError

SKIPPED = ("pitcrew.dev", "pitcrew.sim")
"""Development tooling, checked on its own."""
STAND_INS: frozenset[type[BaseException]] = frozenset({SimNvmlError})
"""Stand-ins for a foreign library's error, which must travel where that error does
(each says why in its docstring)."""


def modules(package: ModuleType) -> Iterator[ModuleType]:
    yield package
    for found in pkgutil.iter_modules(package.__path__, f"{package.__name__}."):
        if found.name.startswith(SKIPPED) or found.name.endswith(".__main__"):
            continue
        module = importlib.import_module(found.name)
        if found.ispkg:
            yield from modules(module)
        else:
            yield module


def public_errors(package: ModuleType) -> list[type[BaseException]]:
    return [
        value
        for module in modules(package)
        for name, value in vars(module).items()
        if inspect.isclass(value)
        and issubclass(value, BaseException)
        and value.__module__ == module.__name__
        and not name.startswith("_")
        and value not in STAND_INS
    ]


@pytest.mark.parametrize(
    ("package", "root"), [(pitcrew, PitcrewError), (gpuhealth, GpuhealthError)]
)
def test_every_public_error_derives_from_its_packages_root(
    package: ModuleType, root: type[Exception]
) -> None:
    found = public_errors(package)
    assert root in found  # the walk did reach the modules
    outside = sorted(f"{e.__module__}.{e.__qualname__}" for e in found if not issubclass(e, root))
    assert outside == [], f"derive these from {root.__module__}.{root.__name__}"

"""A training job without the hook's extra reads which one to install, in one line,
instead of a bare ``No module named 'lightning'``."""

from __future__ import annotations

import importlib
import sys

import pytest


@pytest.mark.parametrize(
    ("module", "missing", "said"),
    [
        (
            "pitcrew.client.lightning",
            ("lightning", "lightning.pytorch", "pytorch_lightning"),  # either package serves
            "pip install 'pitcrew-operator[lightning]'",
        ),
        ("pitcrew.client.hf", ("transformers",), "pip install 'pitcrew-operator[hf]'"),
        ("pitcrew.client.distributed", ("torch",), "pip install torch"),
    ],
)
def test_a_hook_without_its_extra_says_what_to_install(
    module: str, missing: tuple[str, ...], said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(sys.modules, module, raising=False)  # imported afresh, then restored
    for name in missing:
        monkeypatch.setitem(sys.modules, name, None)  # what an environment without it gives
    with pytest.raises(ImportError, match=r"^\S+ needs .*: ") as refused:
        importlib.import_module(module)
    assert said in str(refused.value)
    assert "\n" not in str(refused.value)

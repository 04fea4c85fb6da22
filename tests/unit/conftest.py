"""Unit-test fixtures shared by several files (opt-in, never autouse here)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No STREAMMOM_* variable (nor the config-file pointer) for the test: settings come only
    from what the test passes."""
    for key in list(os.environ):
        if key.startswith("STREAMMOM_"):
            monkeypatch.delenv(key, raising=False)

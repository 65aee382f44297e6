"""What a test does when something the machine should have is missing."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def skip_or_fail(why: str, *, module: bool = False) -> NoReturn:
    """Skip locally; in CI (CI=true, where `.ci/run` installs everything) fail, never a
    silent pass."""
    if os.environ.get("CI") == "true":
        pytest.fail(why, pytrace=False)
    pytest.skip(why, allow_module_level=module)

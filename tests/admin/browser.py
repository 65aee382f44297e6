"""Debian's Chromium driven by Playwright, and signing in to the admin page as a person does.

Browser test modules skip themselves when Chromium is missing (`require_chromium()` at module
level); CI installs it, so they never skip there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WAIT = 15_000  # ms
PAGE_KEY = "undoproxy.page"  # the page's sessionStorage entry


def require_chromium() -> None:
    """Skip the calling module when Chromium is not installed."""
    if not CHROMIUM.exists():
        pytest.skip(f"Chromium not installed: {CHROMIUM} is missing", allow_module_level=True)

"""Debian's Chromium driven by Playwright, and signing in to the admin page as a person does.

Browser test modules skip themselves when Chromium is missing (`require_chromium()` at module
level); CI installs it, so they never skip there.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.ci import skip_or_fail

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
    """Skip the calling module when Chromium is not installed; in CI (`CI=true`, where
    `.ci/run` installs it) a missing Chromium is a failure, never a silent skip."""
    if not CHROMIUM.exists():
        skip_or_fail(f"Chromium not installed: {CHROMIUM} is missing", module=True)

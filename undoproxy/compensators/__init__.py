"""Pure code that builds the inverse request of a journaled step (no mitmproxy, no aiohttp)."""

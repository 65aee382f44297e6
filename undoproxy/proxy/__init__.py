"""mitmproxy addons (session identity, streaming, rule enforcement, journaling) and the embedding
that runs them next to the admin app in one asyncio loop."""

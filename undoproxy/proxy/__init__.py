"""mitmproxy addons only (session identity, streaming, rule enforcement, holds, snapshots,
journaling), run in order inside one fail-closed guard (`guard.py`). `undoproxy/server.py`
assembles them with the store and the admin app."""

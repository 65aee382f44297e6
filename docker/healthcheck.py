"""The container's health check: the admin API answers on the address its config gives.

Exit 0 when `GET /ca.pem` (public, cheap) answers 200, 1 otherwise. The config is read the way
`undoproxy run` reads it (UNDOPROXY_CONFIG), so a mounted config with other ports is followed.
"""

from __future__ import annotations

import os
import sys
import urllib.request

from undoproxy.config import load_config


def main() -> int:
    """Probe the admin listener; print why when it fails."""
    host, port = load_config(os.environ.get("UNDOPROXY_CONFIG") or None).admin_listen
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    url = f"http://{host}:{port}/ca.pem"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=5) as response:
            ok = response.status == 200
    except OSError as exc:
        print(f"unhealthy: {url}: {exc}", file=sys.stderr)
        return 1
    if not ok:
        print(f"unhealthy: {url} answered {response.status}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

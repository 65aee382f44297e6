"""The echo upstream (tests/support/upstream.py) as a process of its own, for a test host in a
network namespace: tests/runtimes/conftest.py starts it with
`ip netns exec NS python -m tests.support.netns_upstream --host ADDR --cert C --key K`.

It serves the echo app over TLS on ADDR and, on a second plain-HTTP port of ADDR,
`GET /received`: every request the echo got so far, as JSON (method, path, headers, body in
base64), so that a test in the machine's own namespace can tell what reached the upstream.
It prints one JSON line, {"port": P, "records_port": R}, once both listen, and stops when its
standard input closes (the test process stopped it, or is gone).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import sys
from pathlib import Path

from aiohttp import web

from tests.support import upstream
from tests.support.certs import server_context


def _records_app(echo: web.Application) -> web.Application:
    async def received(request: web.Request) -> web.Response:
        return web.json_response(
            [
                {
                    "method": r.method,
                    "path": r.path,
                    "headers": r.headers,
                    "body": base64.b64encode(r.body).decode("ascii"),
                }
                for r in echo[upstream.RECEIVED]
            ]
        )

    app = web.Application()
    app.router.add_get("/received", received)
    return app


async def _serve(host: str, cert: Path, key: Path) -> None:
    echo = upstream.create_app()
    runners = [
        web.AppRunner(echo, access_log=None, shutdown_timeout=0.5),
        web.AppRunner(_records_app(echo), access_log=None, shutdown_timeout=0.5),
    ]
    ports = []
    try:
        for runner, context in zip(runners, (server_context((cert, key)), None), strict=True):
            await runner.setup()
            await web.TCPSite(runner, host, 0, ssl_context=context).start()
            ports.append(runner.addresses[0][1])
        print(json.dumps({"port": ports[0], "records_port": ports[1]}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.buffer.read)
    finally:
        for runner in runners:
            await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="the echo upstream, for a test host")
    parser.add_argument("--host", required=True, help="the namespace's own address")
    parser.add_argument("--cert", type=Path, required=True)
    parser.add_argument("--key", type=Path, required=True)
    args = parser.parse_args(argv)
    asyncio.run(_serve(args.host, args.cert, args.key))


if __name__ == "__main__":
    main()

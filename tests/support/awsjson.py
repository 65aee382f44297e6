"""Real AWS JSON services (DynamoDB, Secrets Manager, SSM, SQS) from moto's server app, over
TLS, with signature checks on: every request must carry a SigV4 signature of its own.

As in tests/support/s3.py, one moto app holds every service; here it listens on one port per
service, so that each service has an endpoint of its own as on AWS (`dynamodb.REGION…`,
`ssm.REGION…`), and a `signing:` entry per endpoint names that service.
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import requests

from tests.support.s3 import POLICY, REGION, _QuietHandler

try:
    import boto3
    from botocore.config import Config
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import BaseWSGIServer, make_server
except ImportError:  # pragma: no cover - the test setup installs them
    boto3 = None

SERVICES = ("dynamodb", "secretsmanager", "ssm", "sqs")
OFF = b"1000000000"  # moto's count of requests let through unsigned: checks off


class MotoAws:
    """moto's server on one https://127.0.0.1:PORT per service; `start()` creates the agent's
    key and undoproxy's, then turns signature checking on."""

    def __init__(self, cert: tuple[Path, Path]) -> None:
        self.cert = cert
        self._servers: dict[str, BaseWSGIServer] = {}
        self._threads: list[threading.Thread] = []
        self.keys: dict[str, tuple[str, str]] = {}

    def start(self) -> MotoAws:
        app = DomainDispatcherApplication(create_backend_app)
        for service in SERVICES:
            server = make_server(
                "127.0.0.1",
                0,
                app,
                threaded=True,
                request_handler=_QuietHandler,
                ssl_context=(str(self.cert[0]), str(self.cert[1])),
            )
            self._servers[service] = server
            thread = threading.Thread(target=server.serve_forever, daemon=True)
            thread.start()
            self._threads.append(thread)
        # moto's state is the process's: another module's server (tests/support/s3.py) may
        # have turned checks on already, and made users of the same names.
        self._auth(OFF)
        iam = self.client("iam", "bootstrap", "bootstrap", service_port="sqs")
        suffix = uuid.uuid4().hex[:8]
        for user in ("agent", "undoproxy"):
            name = f"{user}-{suffix}"
            iam.create_user(UserName=name)
            iam.put_user_policy(UserName=name, PolicyName="all", PolicyDocument=POLICY)
            key = iam.create_access_key(UserName=name)["AccessKey"]
            self.keys[user] = (key["AccessKeyId"], key["SecretAccessKey"])
        self._auth(b"0")  # from now on every request must be signed
        return self

    def _auth(self, unchecked: bytes) -> None:
        """Let the next `unchecked` requests through unsigned (b"0": check every one)."""
        url = f"{self.url('sqs')}/moto-api/reset-auth"
        requests.post(url, data=unchecked, verify=False, timeout=30).raise_for_status()

    def url(self, service: str) -> str:
        return f"https://127.0.0.1:{self._servers[service].server_port}"

    def host(self, service: str) -> str:
        """127.0.0.1:PORT of the service's endpoint (a pack's `hosts:`, a `signing:` host)."""
        return f"127.0.0.1:{self._servers[service].server_port}"

    def client(
        self, name: str, key_id: str, secret: str, *, service_port: str = "", **config: Any
    ) -> Any:
        return boto3.client(
            name,
            endpoint_url=self.url(service_port or name),
            region_name=REGION,
            aws_access_key_id=key_id,
            aws_secret_access_key=secret,
            verify=str(self.cert[0]),
            config=Config(retries={"max_attempts": 1}, **config),
        )

    def direct(self, service: str) -> Any:
        """The owner's client, straight to the server (to read the truth)."""
        return self.client(service, *self.keys["agent"])

    def through(self, service: str, proxy_url: str, ca_bundle: str) -> Any:
        """The agent's client for `service`, through undoproxy (trusting its CA)."""
        key_id, secret = self.keys["agent"]
        return boto3.client(
            service,
            endpoint_url=self.url(service),
            region_name=REGION,
            aws_access_key_id=key_id,
            aws_secret_access_key=secret,
            verify=ca_bundle,
            config=Config(
                proxies={"https": proxy_url, "http": proxy_url}, retries={"max_attempts": 1}
            ),
        )

    def config(self, key_env: str, secret_env: str) -> dict[str, Any]:
        """undoproxy's config: the four packs on their endpoints, a signing key for each."""
        return {
            "packs": [{"name": s, "hosts": [self.host(s)]} for s in SERVICES],
            "signing": [
                {
                    "host": self.host(s),
                    "aws": {
                        "access_key_id": f"${{{key_env}}}",
                        "secret_access_key": f"${{{secret_env}}}",
                        "region": REGION,
                        "service": s,
                    },
                }
                for s in SERVICES
            ],
        }

    def stop(self) -> None:
        self._auth(OFF)  # as another module's moto expects to find it
        for server in self._servers.values():
            server.shutdown()
        for thread in self._threads:
            thread.join(10)

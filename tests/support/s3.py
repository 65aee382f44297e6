"""A real S3-compatible server (moto's server app, from PyPI) over TLS, with signature checks on.

moto's own server (`moto.moto_server`, the app `ThreadedMotoServer` runs) is served by werkzeug
with the test upstream certificate. Once an IAM user with an access key exists, authentication
is switched on (moto's `INITIAL_NO_AUTH_ACTION_COUNT` = 0, through its `/moto-api/reset-auth`):
every request must then carry a SigV4 signature, computed with that key, of its own method,
path, query, signed headers and body, or moto answers 403 `SignatureDoesNotMatch`. So a
snapshot or a compensation only succeeds if undoproxy signed it itself, correctly.

Tests read the truth with `direct()`: a boto3 client that talks to the server without the
proxy.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import requests

try:
    import boto3
    from botocore.config import Config
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import BaseWSGIServer, make_server
except ImportError:  # pragma: no cover - the test setup installs them
    boto3 = None
    MotoRequestHandler = object

REGION = "us-east-1"


class _QuietHandler(MotoRequestHandler):  # type: ignore[misc]
    def log_request(self, *args: Any, **kwargs: Any) -> None:
        pass


POLICY = '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]}'


class MotoS3:
    """moto's server on https://127.0.0.1:PORT; `start()` creates the agent's access key and
    turns signature checking on. One instance serves one test module."""

    def __init__(self, cert: tuple[Path, Path], host: str = "127.0.0.1") -> None:
        self.cert = cert
        self.address = host  # 127.0.0.2: loopback, yet not in the NO_PROXY `env` prints
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None
        self.access_key_id = ""
        self.secret_access_key = ""
        # undoproxy's own key (a second IAM user): what `signing:` gives it
        self.undo_key_id = ""
        self.undo_secret = ""

    def start(self) -> MotoS3:
        app = DomainDispatcherApplication(create_backend_app)
        self._server = make_server(
            self.address,
            0,
            app,
            threaded=True,
            request_handler=_QuietHandler,
            ssl_context=(str(self.cert[0]), str(self.cert[1])),
        )
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        iam = self._client("iam", "bootstrap", "bootstrap")
        keys = []
        for user in ("agent", "undoproxy"):
            iam.create_user(UserName=user)
            iam.put_user_policy(UserName=user, PolicyName="all", PolicyDocument=POLICY)
            key = iam.create_access_key(UserName=user)["AccessKey"]
            keys.append((key["AccessKeyId"], key["SecretAccessKey"]))
        (self.access_key_id, self.secret_access_key), (self.undo_key_id, self.undo_secret) = keys
        r = requests.post(
            f"{self.base_url}/moto-api/reset-auth", data=b"0", verify=False, timeout=30
        )
        r.raise_for_status()
        return self

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"https://{self.address}:{self._server.server_port}"

    @property
    def host(self) -> str:
        """127.0.0.1:PORT, as a `signing:` entry or a pack's `hosts:` names it."""
        assert self._server is not None
        return f"{self.address}:{self._server.server_port}"

    def _client(self, service: str, key_id: str, secret: str, **config: Any) -> Any:
        return boto3.client(
            service,
            endpoint_url=self.base_url,
            region_name=REGION,
            aws_access_key_id=key_id,
            aws_secret_access_key=secret,
            verify=str(self.cert[0]),
            config=Config(retries={"max_attempts": 1}, **config),
        )

    def direct(self) -> Any:
        """An S3 client with the agent's key that bypasses the proxy (to read the truth)."""
        return self._client("s3", self.access_key_id, self.secret_access_key)

    def through(self, proxy_url: str, ca_bundle: str) -> Any:
        """The agent: an S3 client with the same key, through undoproxy (trusting its CA)."""
        client = boto3.client(
            "s3",
            endpoint_url=self.base_url,
            region_name=REGION,
            aws_access_key_id=self.access_key_id,
            aws_secret_access_key=self.secret_access_key,
            verify=ca_bundle,
            config=Config(
                proxies={"https": proxy_url, "http": proxy_url}, retries={"max_attempts": 1}
            ),
        )
        return client

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
        if self._thread is not None:
            self._thread.join(10)


def object_state(s3: Any, bucket: str, key: str) -> dict[str, Any] | None:
    """Everything a user would check of one object: body, headers that are part of it, user
    metadata and tags (None when it does not exist)."""
    try:
        got = s3.get_object(Bucket=bucket, Key=key)
    except s3.exceptions.NoSuchKey:
        return None
    tags = s3.get_object_tagging(Bucket=bucket, Key=key)["TagSet"]
    return {
        "body": got["Body"].read(),
        "ContentType": got.get("ContentType"),
        "CacheControl": got.get("CacheControl"),
        "ContentDisposition": got.get("ContentDisposition"),
        "ContentLanguage": got.get("ContentLanguage"),
        "ContentEncoding": got.get("ContentEncoding"),
        "Metadata": got.get("Metadata"),
        "Tags": sorted((t["Key"], t["Value"]) for t in tags),
    }


def bucket_state(s3: Any, bucket: str) -> dict[str, Any]:
    """Every object of a bucket, by key, as `object_state` reads it."""
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    return {key: object_state(s3, bucket, key) for key in sorted(keys)}

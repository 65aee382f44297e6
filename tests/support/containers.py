"""Docker from the tests: the CLI, building the image, containers that are always removed, and
Compose projects that are always taken down.

Every container runs with `--network host` and listens on loopback ports its config names: no
traffic goes to a Docker bridge. `docker/ci-setup.sh` (run by `.ci/run`) installs and starts
the engine and docker-compose, and builds the local base image the builds start from.
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import tarfile
import time
import uuid
from pathlib import Path
from typing import Any

import requests

from tests.support.ci import skip_or_fail

REPO = Path(__file__).resolve().parents[2]
BASE_IMAGE = os.environ.get("UNDOPROXY_BASE_IMAGE", "undoproxy-base:bookworm")
SETUP = "docker/ci-setup.sh"
# The CA bundle pip trusts during the build (PyPI may be reached through a TLS-inspecting
# proxy whose CA only the host knows); given to the build as a secret, not kept in the image.
HOST_CA_BUNDLES = (os.environ.get("SSL_CERT_FILE", ""), "/etc/ssl/certs/ca-certificates.crt")
# The image tests/test_container.py and tests/test_deploy_*.py build from the Dockerfile.
TEST_IMAGE = "undoproxy-test:latest"
# deploy/: the compose file, and the names the tests give the images it builds on BASE_IMAGE.
COMPOSE_FILE = REPO / "deploy" / "docker-compose.yml"
TEST_POSTGRES_IMAGE = "undoproxy-test-postgres:latest"
TEST_LB_IMAGE = "undoproxy-test-haproxy:latest"
IMAGE_VARIABLES = {
    "UNDOPROXY_IMAGE": TEST_IMAGE,
    "UNDOPROXY_POSTGRES_IMAGE": TEST_POSTGRES_IMAGE,
    "UNDOPROXY_LB_IMAGE": TEST_LB_IMAGE,
    "UNDOPROXY_BASE": BASE_IMAGE,
    "UNDOPROXY_DEBIAN_BASE": BASE_IMAGE,
}
_ADDR = re.compile(r"^\s+(proxy|admin)\s+http://([\d.]+):(\d+)", re.M)


def docker_cli() -> str | None:
    """The docker client to use: UNDOPROXY_DOCKER, else Debian's (its BuildKit is built in; a
    newer client without the buildx plugin cannot build with BuildKit), else `docker`."""
    chosen = os.environ.get("UNDOPROXY_DOCKER")
    if chosen:
        return chosen
    if Path("/usr/bin/docker").is_file():
        return "/usr/bin/docker"
    return shutil.which("docker")


def free_port() -> int:
    """A loopback port nothing listens on right now (for a config that must name its port)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def ready_docker() -> Docker:
    """The engine, once it answers and has the base image; else skip (locally) or fail (CI)
    with what is missing."""
    cli = docker_cli()
    if cli is None:
        skip_or_fail(f"docker is not installed; run {SETUP} as root")
    engine = Docker(cli)
    why = engine.why_not_ready()
    if why is not None:
        skip_or_fail(why)
    return engine


class DockerError(RuntimeError):
    """A docker command failed; the message has its output."""


_BUILT: set[str] = set()


class Docker:
    """Runs docker commands; every failure raises with what docker said."""

    def __init__(self, cli: str) -> None:
        self.cli = cli

    def __call__(
        self, *args: str, timeout: float = 120, check: bool = True, input: bytes | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        done = subprocess.run(
            [self.cli, *args],
            capture_output=True,
            timeout=timeout,
            input=input,
            env={**os.environ, "DOCKER_BUILDKIT": "1"},
        )
        if check and done.returncode != 0:
            raise DockerError(
                f"docker {' '.join(args)} exited {done.returncode}:\n"
                + (done.stdout + done.stderr).decode(errors="replace")[-4000:]
            )
        return done

    def why_not_ready(self) -> str | None:
        """None when the engine answers and the base image is there, else what is missing."""
        try:
            info = self("info", "--format", "{{.ServerVersion}}", timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"docker ({self.cli}) cannot be run: {exc}"
        if info.returncode != 0:
            return f"no Docker engine answers ({self.cli} info failed); run {SETUP} as root"
        if self("image", "inspect", BASE_IMAGE, check=False).returncode != 0:
            return f"the base image {BASE_IMAGE} is missing; run {SETUP} as root"
        return None

    def build_once(self, tag: str, log: Path) -> None:
        """`build`, unless this process built `tag` already (modules share the image)."""
        if tag not in _BUILT:
            self.build(tag, log)
            _BUILT.add(tag)

    def build(self, tag: str, log: Path, timeout: float = 900) -> None:
        """Build the repository's Dockerfile on BASE_IMAGE, with the layer cache; the build's
        output goes to `log`."""
        args = ["build", "--progress", "plain", "--network", "host"]
        args += ["--build-arg", f"BASE={BASE_IMAGE}", "-t", tag]
        bundle = next((b for b in HOST_CA_BUNDLES if b and Path(b).is_file()), None)
        if bundle is not None:
            args += ["--secret", f"id=ca-bundle,src={bundle}"]
        previous = self.image_id(tag)
        done = self(*args, str(REPO), timeout=timeout, check=False)
        log.write_bytes(done.stdout + done.stderr)
        if done.returncode != 0:
            tail = log.read_text(errors="replace")[-4000:]
            raise DockerError(f"docker build failed (exit {done.returncode}):\n{tail}")
        if previous is not None and previous != self.image_id(tag):
            # The last run's image, untagged now: not kept (the layer cache is kept apart).
            self("image", "rm", previous, check=False)

    def image_id(self, tag: str) -> str | None:
        done = self("image", "inspect", "--format", "{{.Id}}", tag, check=False)
        return done.stdout.decode().strip() or None if done.returncode == 0 else None

    def copy_out(self, container: str, path: str) -> bytes:
        """A file of a container (of its volumes too), as `docker cp` copies it out."""
        tar = self("cp", f"{container}:{path}", "-").stdout
        with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
            member = archive.next()
            assert member is not None
            extracted = archive.extractfile(member)
            assert extracted is not None
            return extracted.read()

    def volume(self, prefix: str) -> str:
        """A new named volume (remove it with `volume rm`)."""
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self("volume", "create", name)
        return name


class Container:
    """`docker run -d --network host` of an image; stop() and remove() are safe to repeat."""

    def __init__(self, docker: Docker, image: str, *run_args: str, command: tuple[str, ...] = ()):
        self.docker = docker
        self.name = f"undoproxy-test-{uuid.uuid4().hex[:8]}"
        self.docker(
            "run", "-d", "--name", self.name, "--network", "host", *run_args, image, *command
        )
        self.removed = False

    def logs(self) -> str:
        done = self.docker("logs", self.name, check=False)
        return (done.stdout + done.stderr).decode(errors="replace")

    def state(self) -> dict[str, object]:
        out = self.docker("inspect", "--format", "{{json .State}}", self.name).stdout
        state: dict[str, object] = json.loads(out)
        return state

    def wait_for_banner(self, timeout: float = 90) -> dict[str, int]:
        """The proxy and admin ports undoproxy printed once ready; raise with its logs if it
        exits or does not get there in time."""
        deadline = time.monotonic() + timeout
        while True:
            logs = self.logs()
            found = {m[0]: int(m[2]) for m in _ADDR.findall(logs)}
            if {"proxy", "admin"} <= found.keys():
                return found
            if not self.state().get("Running") or time.monotonic() > deadline:
                raise DockerError(f"undoproxy in {self.name} did not start:\n{logs}")
            time.sleep(0.3)

    def wait_exit(self, timeout: float = 90) -> int:
        """Wait until the container has exited by itself; its exit code."""
        deadline = time.monotonic() + timeout
        while (state := self.state()).get("Running"):
            if time.monotonic() > deadline:
                raise DockerError(f"{self.name} still runs after {timeout} s:\n{self.logs()}")
            time.sleep(0.3)
        code = state["ExitCode"]
        assert isinstance(code, int)
        return code

    def exec(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
        return self.docker("exec", self.name, *args, timeout=timeout, check=False)

    def read(self, path: str) -> bytes:
        """A file of the container (of its volumes too), as `docker cp` copies it out."""
        return self.docker.copy_out(self.name, path)

    def stop(self, timeout: int = 30) -> int:
        """`docker stop` (SIGTERM, then SIGKILL after `timeout` s); the exit code."""
        self.docker("stop", "--time", str(timeout), self.name, timeout=timeout + 60)
        code = self.state()["ExitCode"]
        assert isinstance(code, int)
        return code

    def remove(self) -> None:
        if not self.removed:
            self.docker("rm", "-f", "-v", self.name, check=False)
            self.removed = True


def compose_command(docker: Docker) -> list[str] | None:
    """How to run Compose: UNDOPROXY_COMPOSE (a command line), else Debian's `docker-compose`
    (what docker/ci-setup.sh installs), else `docker compose` when the client has the plugin."""
    chosen = os.environ.get("UNDOPROXY_COMPOSE")
    if chosen:
        return shlex.split(chosen)
    found = shutil.which("docker-compose")
    if found:
        return [found]
    try:
        plugin = docker("compose", "version", timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return [docker.cli, "compose"] if plugin.returncode == 0 else None


def ready_compose(docker: Docker) -> list[str]:
    """compose_command, or skip (locally) or fail (CI) saying what is missing."""
    command = compose_command(docker)
    if command is None:
        skip_or_fail(f"no Compose (docker-compose, or `docker compose`); run {SETUP} as root")
    return command


class Compose:
    """One project of a compose file: every command with the same project name and variables.
    The variables replace any UNDOPROXY_* of the caller's environment."""

    def __init__(
        self, command: list[str], file: Path, project: str, variables: dict[str, str]
    ) -> None:
        self.command, self.file, self.project = command, file, project
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("UNDOPROXY_")}
        self.env = {**inherited, **variables}

    def __call__(
        self, *args: str, timeout: float = 300, check: bool = True
    ) -> subprocess.CompletedProcess[bytes]:
        done = subprocess.run(
            [*self.command, "--project-name", self.project, "--file", str(self.file), *args],
            capture_output=True,
            timeout=timeout,
            env=self.env,
        )
        if check and done.returncode != 0:
            raise DockerError(
                f"compose {' '.join(args)} exited {done.returncode}:\n"
                + (done.stdout + done.stderr).decode(errors="replace")[-4000:]
            )
        return done

    def build(self, docker: Docker, images: dict[str, str]) -> None:
        """`build` the services {service: the image tag the variables give it}, unless this
        process built them already; the image a tag named before is removed when the build made
        a new one (the layer cache is kept apart)."""
        wanted = {service: tag for service, tag in images.items() if tag not in _BUILT}
        if not wanted:
            return
        previous = {tag: docker.image_id(tag) for tag in wanted.values()}
        self("build", *wanted, timeout=900)
        for tag, old in previous.items():
            if old is not None and old != docker.image_id(tag):
                docker("image", "rm", old, check=False)
        _BUILT.update(wanted.values())

    def container(self, service: str) -> str:
        """The id of the service's (one) container."""
        found = self("ps", "-q", service).stdout.decode().split()
        if len(found) != 1:
            raise DockerError(f"service {service} has containers {found}")
        return found[0]

    def logs(self, *services: str) -> str:
        done = self("logs", "--no-color", *services, check=False)
        return (done.stdout + done.stderr).decode(errors="replace")

    def down(self) -> None:
        """Remove the project's containers and volumes (its images are kept: the cache)."""
        self("down", "--volumes", "--remove-orphans", "--timeout", "10", check=False)


def admin_request(
    port: int | str, token: str, method: str, path: str, **kwargs: Any
) -> requests.Response:
    """A call to the admin API a container serves on loopback `port`, with its token."""
    return requests.request(
        method,
        f"http://127.0.0.1:{port}{path}",
        headers={"Authorization": f"Bearer {token}"},
        proxies={"http": "", "https": ""},
        timeout=60,
        **kwargs,
    )

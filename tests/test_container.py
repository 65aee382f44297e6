"""The Dockerfile, really built and run: a container serves proxy and admin on the loopback ports
of its config, journals an agent's requests on the /data volume, and a new container on the
same volume shows the same steps and rolls the session back.

The image is built once for the module (Docker's layer cache makes a rebuild after a source
edit take seconds); every container and volume made here is removed at teardown.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from tests.support import rest
from tests.support.ci import skip_or_fail
from tests.support.containers import REPO, Container, Docker, docker_cli, free_port
from tests.support.servers import ThreadedServer

IMAGE = "undoproxy-test:latest"
SECRET = "sk-agent-container-SECRET-42"  # the upstream refuses any other credentials


@pytest.fixture(scope="module")
def docker() -> Docker:
    cli = docker_cli()
    if cli is None:
        skip_or_fail("docker is not installed; run docker/ci-setup.sh as root")
    engine = Docker(cli)
    why = engine.why_not_ready()
    if why is not None:
        skip_or_fail(why)
    return engine


@pytest.fixture(scope="module")
def image(docker: Docker, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The repository's Dockerfile built on the local Debian base image."""
    docker.build(IMAGE, tmp_path_factory.mktemp("docker-build") / "build.log")
    return IMAGE


@pytest.fixture
def volume(docker: Docker) -> Iterator[str]:
    name = docker.volume("undoproxy-test-data")
    yield name
    docker("volume", "rm", "-f", name, check=False)


@pytest.fixture
def containers(docker: Docker) -> Iterator[list[Container]]:
    """Containers a test starts; all removed at teardown, whatever happened."""
    started: list[Container] = []
    yield started
    for container in started:
        container.remove()


@pytest.fixture
def api(upstream_cert: tuple[Path, Path]) -> Iterator[tuple[ThreadedServer, rest.RestState]]:
    state = rest.RestState(token=SECRET)
    state.items = {"1": {"id": "1", "name": "Ada", "tier": "gold"}}
    server = rest.serve(state, upstream_cert)
    yield server, state
    server.stop()


def config_dir(directory: Path, proxy_port: int, admin_port: int) -> Path:
    """A folder to mount on /config: loopback ports (the container shares the host's network),
    state and journal on /data, the test upstream's self-signed certificate accepted."""
    config = {
        "proxy": {"listen": f"127.0.0.1:{proxy_port}", "upstream_insecure": True},
        "admin": {"listen": f"127.0.0.1:{admin_port}"},
        "state_dir": "/data",
        "store": {"path": "/data/undoproxy.db"},
    }
    directory.mkdir()
    (directory / "config.yaml").write_text(yaml.safe_dump(config))
    # The container's user (uid 10001) reads it through the bind mount.
    directory.chmod(0o755)
    (directory / "config.yaml").chmod(0o644)
    return directory


def admin(port: int, token: str, method: str, path: str, **kwargs: Any) -> requests.Response:
    return requests.request(
        method,
        f"http://127.0.0.1:{port}{path}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
        proxies={"http": "", "https": ""},
        **kwargs,
    )


def test_the_image_runs_as_a_non_root_user_with_a_valid_default_config(
    docker: Docker, image: str
) -> None:
    uid = docker("run", "--rm", "--network", "host", "--entrypoint", "id", image, "-u")
    assert uid.stdout.decode().strip() == "10001"
    check = docker("run", "--rm", "--network", "host", image, "rules", "check")
    assert b"/config/config.yaml: OK" in check.stdout, check.stdout + check.stderr
    shipped = yaml.safe_load((REPO / "docker" / "config.yaml").read_text())
    assert shipped["state_dir"] == "/data" and shipped["store"]["path"].startswith("/data/")


def test_a_request_journaled_on_the_volume_is_rolled_back_by_a_replacement_container(
    docker: Docker,
    image: str,
    volume: str,
    containers: list[Container],
    api: tuple[ThreadedServer, rest.RestState],
    tmp_path: Path,
) -> None:
    if shutil.which("curl") is None:
        skip_or_fail("curl is not installed")
    server, state = api
    before = state.snapshot()
    proxy_port, admin_port = free_port(), free_port()
    config = config_dir(tmp_path / "config", proxy_port, admin_port)
    run_args = ("-v", f"{volume}:/data", "-v", f"{config}:/config:ro")

    first = Container(docker, image, *run_args)
    containers.append(first)
    assert first.wait_for_banner() == {"proxy": proxy_port, "admin": admin_port}
    health = first.exec("python3", "/usr/local/lib/undoproxy/healthcheck.py")
    assert health.returncode == 0, health.stdout + health.stderr
    token = first.read("/data/admin-token").decode().strip()
    assert token in first.logs()  # printed once, at first start, for the person running it
    ca_bundle = tmp_path / "ca-bundle.pem"
    ca_bundle.write_bytes(first.read("/data/ca-bundle.pem"))

    # An agent: curl creates an item, requests changes the existing one; both trust only the
    # CA the container keeps on /data.
    session = f"c-{uuid.uuid4().hex[:8]}"
    proxy_url = f"http://{session}:x@127.0.0.1:{proxy_port}"
    curl = ["curl", "-sS", "--fail", "--noproxy", "", "--proxy", proxy_url]
    created = subprocess.run(
        [
            *curl,
            *("--cacert", str(ca_bundle), "-H", f"Authorization: Bearer {SECRET}"),
            *("-H", "Content-Type: application/json", "-d", '{"name": "Linus"}'),
            f"{server.base_url}/items",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert created.returncode == 0, created.stderr
    new_id = json.loads(created.stdout)["id"]
    with requests.Session() as agent:
        agent.trust_env = False
        agent.proxies = {"https": proxy_url}
        agent.verify = str(ca_bundle)
        agent.headers["Authorization"] = f"Bearer {SECRET}"
        agent.patch(f"{server.base_url}/items/1", json={"tier": "platinum"}).raise_for_status()
    assert new_id in state.items and state.items["1"]["tier"] == "platinum"

    shown = admin(admin_port, token, "GET", f"/api/sessions/{session}").json()
    steps = [(s["id"], s["method"], s["status"]) for s in shown["steps"]]
    assert [(method, status) for _, method, status in steps] == [
        ("POST", "succeeded"),
        ("PATCH", "succeeded"),
    ], shown["steps"]
    listing = first.exec("ls", "/data")
    assert b"undoproxy.db" in listing.stdout.split()

    # The journal is one process's: a second container on the same volume refuses to start.
    rival = Container(docker, image, *run_args)
    containers.append(rival)
    assert rival.wait_exit() != 0
    assert "undoproxy.db is in use" in rival.logs(), rival.logs()
    rival.remove()

    # Replace the container: stopped cleanly (the journal flushed), removed, and a new one
    # started on the same volume and config.
    assert first.stop() == 0, first.logs()
    assert "journal flushed" in first.logs()
    first.remove()
    second = Container(docker, image, *run_args)
    containers.append(second)
    assert second.wait_for_banner() == {"proxy": proxy_port, "admin": admin_port}
    assert token not in second.logs()  # not generated again: the same token, from /data
    again = admin(admin_port, token, "GET", f"/api/sessions/{session}")
    assert again.status_code == 200, again.text
    assert [(s["id"], s["method"], s["status"]) for s in again.json()["steps"]] == steps
    # The CLI inside the container finds the token on /data by itself.
    cli = second.exec("undoproxy", "show", session, "--admin", f"http://127.0.0.1:{admin_port}")
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert f"session {session}  state: open  steps: 2".encode() in cli.stdout, cli.stdout

    # Its rollback needs what the first container kept on /data: the snapshot of item 1 and
    # the agent's credentials, encrypted with the volume's credentials key.
    report = admin(admin_port, token, "POST", f"/api/sessions/{session}/rollback", json={})
    assert report.status_code == 200, report.text
    assert report.json()["state"] == "rolled_back", report.json()
    assert [s["status"] for s in report.json()["steps"]] == ["compensated", "compensated"]
    assert state.items == before
    assert ("DELETE", f"/items/{new_id}") in state.log
    final = admin(admin_port, token, "GET", f"/api/sessions/{session}").json()
    assert final["state"] == "rolled_back"
    assert second.stop() == 0, second.logs()

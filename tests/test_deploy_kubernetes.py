"""deploy/kubernetes/, checked without a cluster (none can run here).

First what reading them can check: every manifest parses and kustomization.yaml names them
all; the Secret make-secret.py prints has every key the manifests read; Services, policies and
probes name ports and pods that exist; the ConfigMap's config is accepted by undoproxy's own
config loader and CLI, and agrees with the pods' ports, mounts and the PostgreSQL Service.

Then the pods as written, run by Docker: the StatefulSet's PostgreSQL and two pods of the
Deployment (init container, then undoproxy, with the Deployment's user, read-only root file
system, dropped capabilities, env, volumes and args; the probes run as the kubelet would).
What differs from a cluster, and only that: every container is on the host's network, so the
config's listen addresses become loopback ports of their own and store.url's host the
PostgreSQL container's port; PostgreSQL is Debian's (deploy/postgres, the same variables as the
official image the manifest names) as that image's own user; upstream_insecure is set for the
test's self-signed upstream; Secret and ConfigMap volumes are folders, emptyDirs are volumes.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests
import yaml
from cryptography import x509
from cryptography.fernet import Fernet
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from tests.support import holding, rest
from tests.support.containers import (
    COMPOSE_FILE,
    IMAGE_VARIABLES,
    REPO,
    TEST_IMAGE,
    TEST_POSTGRES_IMAGE,
    Compose,
    Container,
    Docker,
    admin_request,
    free_port,
    ready_compose,
    ready_docker,
)
from tests.support.servers import ThreadedServer
from undoproxy.config import MIN_ADMIN_TOKEN, load_config

KUBE = REPO / "deploy" / "kubernetes"
SECRET_NAME = "undoproxy"
AGENT_SECRET = "sk-agent-kube-SECRET-9"  # the upstream refuses any other credentials

Doc = dict[str, Any]


def load_manifests() -> dict[tuple[str, str], Doc]:
    """(kind, name) -> manifest, from the files kustomization.yaml names."""
    kustomization = yaml.safe_load((KUBE / "kustomization.yaml").read_text())
    found: dict[tuple[str, str], Doc] = {}
    for resource in kustomization["resources"]:
        for doc in yaml.safe_load_all((KUBE / resource).read_text()):
            key = (doc["kind"], doc["metadata"]["name"])
            assert key not in found, f"{key} twice"
            found[key] = doc
    return found


def make_secret(*args: str) -> Doc:
    done = subprocess.run(
        [sys.executable, str(KUBE / "make-secret.py"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    secret: Doc = yaml.safe_load(done.stdout)
    return secret


def secret_values(secret: Doc) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in secret["data"].items()}


@pytest.fixture(scope="module")
def manifests() -> dict[tuple[str, str], Doc]:
    return load_manifests()


@pytest.fixture(scope="module")
def secret() -> Doc:
    return make_secret()


def pod_spec(manifests: dict[tuple[str, str], Doc], kind: str, name: str) -> Doc:
    spec: Doc = manifests[(kind, name)]["spec"]["template"]["spec"]
    return spec


def workloads(manifests: dict[tuple[str, str], Doc]) -> list[Doc]:
    return [d for (kind, _), d in manifests.items() if kind in ("Deployment", "StatefulSet")]


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def container_ports(workload: Doc) -> dict[str, int]:
    return {
        p["name"]: p["containerPort"]
        for c in workload["spec"]["template"]["spec"]["containers"]
        for p in c.get("ports", [])
    }


def test_every_manifest_parses_and_the_kustomization_names_them_all(
    manifests: dict[tuple[str, str], Doc],
) -> None:
    kustomization = yaml.safe_load((KUBE / "kustomization.yaml").read_text())
    on_disk = {p.name for p in KUBE.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == on_disk
    namespace = kustomization["namespace"]
    assert ("Namespace", namespace) in manifests
    for (kind, name), doc in manifests.items():
        assert doc["apiVersion"] and doc["metadata"]["labels"]["app.kubernetes.io/name"]
        if kind != "Namespace":
            assert doc["metadata"]["namespace"] == namespace, (kind, name)
    kinds = sorted(kind for kind, _ in manifests)
    assert kinds == sorted(
        ["Namespace", "ConfigMap", "Deployment", "StatefulSet", "PodDisruptionBudget"]
        + ["Service"] * 3
        + ["NetworkPolicy"] * 2
    )
    assert manifests[("Deployment", "undoproxy")]["spec"]["replicas"] >= 2
    assert [i["name"] for i in kustomization["images"]] == ["undoproxy"]
    images = {
        c["image"].split(":")[0]
        for spec in (pod_spec(manifests, "Deployment", "undoproxy"),)
        for c in spec["containers"] + spec["initContainers"]
    }
    assert images == {"undoproxy"}  # all replaced by the kustomization's `images:`


def test_the_secret_make_secret_prints_has_every_key_the_manifests_read(
    manifests: dict[tuple[str, str], Doc], secret: Doc, tmp_path: Path
) -> None:
    assert secret["kind"] == "Secret" and secret["metadata"]["name"] == SECRET_NAME
    assert secret["metadata"]["namespace"] == "undoproxy"
    values = secret_values(secret)
    read: set[str] = set()
    for workload in workloads(manifests):
        spec = workload["spec"]["template"]["spec"]
        for container in spec["containers"] + spec.get("initContainers", []):
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["name"] == SECRET_NAME
                    read.add(ref["key"])
        for volume in spec.get("volumes", []):
            if "secret" in volume:
                assert volume["secret"]["secretName"] == SECRET_NAME
                read |= {item["key"] for item in volume["secret"]["items"]}
    assert read == set(values)
    Fernet(values["credentials-key"])  # a valid key
    assert len(values["admin-token"].strip()) >= MIN_ADMIN_TOKEN
    cert = x509.load_pem_x509_certificate(values["mitmproxy-ca-cert.pem"])
    key = load_pem_private_key(values["mitmproxy-ca.pem"], None)
    assert cert.public_key() == key.public_key()
    assert x509.load_pem_x509_certificates(values["mitmproxy-ca.pem"])[0] == cert
    # Each run makes new values ...
    again = secret_values(make_secret())
    assert all(again[k] != values[k] for k in values)
    # ... unless they come from an existing undoproxy's state dir (its agents trust its CA).
    state = tmp_path / "state"
    state.mkdir()
    for name, field in (
        ("mitmproxy-ca.pem", "mitmproxy-ca.pem"),
        ("mitmproxy-ca-cert.pem", "mitmproxy-ca-cert.pem"),
        ("credentials.key", "credentials-key"),
        ("admin-token", "admin-token"),
    ):
        (state / name).write_bytes(values[field])
    kept = secret_values(make_secret("--state-dir", str(state)))
    assert {k: kept[k] for k in values if k != "postgres-password"} == {
        k: values[k] for k in values if k != "postgres-password"
    }


def test_services_policies_and_probes_name_pods_and_ports_that_exist(
    manifests: dict[tuple[str, str], Doc],
) -> None:
    pods = workloads(manifests)
    for workload in pods:
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert matches(workload["spec"]["selector"]["matchLabels"], labels)
    for (kind, name), doc in manifests.items():
        if kind == "Service":
            selected = [
                w
                for w in pods
                if matches(doc["spec"]["selector"], w["spec"]["template"]["metadata"]["labels"])
            ]
            assert len(selected) == 1, name
            ports = container_ports(selected[0])
            for port in doc["spec"]["ports"]:
                assert port["targetPort"] in ports, (name, port)
        if kind in ("NetworkPolicy", "PodDisruptionBudget"):
            selector = doc["spec"].get("podSelector") or doc["spec"]["selector"]
            selected = [
                w
                for w in pods
                if matches(selector["matchLabels"], w["spec"]["template"]["metadata"]["labels"])
            ]
            assert len(selected) == 1, name
            for rule in doc["spec"].get("ingress", []):
                for port in rule["ports"]:
                    assert port["port"] in container_ports(selected[0]), (name, port)
                for source in rule.get("from", []):
                    wanted = source["podSelector"]["matchLabels"]
                    assert wanted == {"undoproxy-admin-access": "true"} or any(
                        matches(wanted, w["spec"]["template"]["metadata"]["labels"]) for w in pods
                    ), (name, wanted)
    statefulset = manifests[("StatefulSet", "undoproxy-postgres")]
    assert ("Service", statefulset["spec"]["serviceName"]) in manifests
    for workload in pods:
        spec = workload["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        claims = {c["metadata"]["name"] for c in workload["spec"].get("volumeClaimTemplates", [])}
        for container in spec["containers"] + spec.get("initContainers", []):
            for mount in container.get("volumeMounts", []):
                assert mount["name"] in volumes or mount["name"] in claims, mount
            for probe in ("readinessProbe", "livenessProbe"):
                port = container.get(probe, {}).get("tcpSocket", {}).get("port")
                if port is not None:
                    assert port in container_ports(workload)
        for volume in volumes.values():
            if "configMap" in volume:
                assert ("ConfigMap", volume["configMap"]["name"]) in manifests
    # The undoproxy probe is the image's own health check.
    probe = pod_spec(manifests, "Deployment", "undoproxy")["containers"][0]["readinessProbe"]
    script = probe["exec"]["command"][-1]
    assert f"COPY docker/healthcheck.py {script}" in (REPO / "Dockerfile").read_text()


def test_the_configmaps_config_is_accepted_by_undoproxy_and_agrees_with_the_pods(
    manifests: dict[tuple[str, str], Doc],
    secret: Doc,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = pod_spec(manifests, "Deployment", "undoproxy")
    container = spec["containers"][0]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    config_volume = next(n for n, v in volumes.items() if "configMap" in v)
    configmap = manifests[("ConfigMap", volumes[config_volume]["configMap"]["name"])]
    assert container["args"][:2] == ["run", "-c"]
    config_path = Path(container["args"][2])
    assert config_path.parent == Path(mounts[config_volume])
    folder = tmp_path / "config"
    folder.mkdir()
    for name, text in configmap["data"].items():
        (folder / name).write_text(text)
    values = secret_values(secret)
    env = {
        e["name"]: values[e["valueFrom"]["secretKeyRef"]["key"]].decode() for e in container["env"]
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    config = load_config(folder / config_path.name)
    assert config.admin_token == env["UNDOPROXY_ADMIN_TOKEN"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert config.proxy_listen == ("0.0.0.0", ports["proxy"])
    assert config.admin_listen == ("0.0.0.0", ports["admin"])
    assert str(config.state_dir) == mounts["data"] and "emptyDir" in volumes["data"]
    # The init container fills that state dir with the Secret's CA.
    init = spec["initContainers"][0]
    init_mounts = {m["name"]: m["mountPath"] for m in init["volumeMounts"]}
    assert init_mounts["data"] == mounts["data"]
    for item in volumes[next(n for n, v in volumes.items() if "secret" in v)]["secret"]["items"]:
        assert f"{init_mounts['ca']}/{item['path']}" in init["command"][-1]
    # The journal is the StatefulSet's PostgreSQL, by its Service, as its user and database.
    url = urlsplit(config.store_url or "")
    service = manifests[("Service", url.hostname or "")]
    assert url.port == service["spec"]["ports"][0]["port"]
    postgres = pod_spec(manifests, "StatefulSet", "undoproxy-postgres")["containers"][0]
    pg_env = {
        e["name"]: e.get("value") or e["valueFrom"]["secretKeyRef"]["key"] for e in postgres["env"]
    }
    assert (url.username, url.path) == (pg_env["POSTGRES_USER"], "/" + pg_env["POSTGRES_DB"])
    assert pg_env["POSTGRES_PASSWORD"] == next(
        e["valueFrom"]["secretKeyRef"]["key"] for e in container["env"] if e["name"] == "PGPASSWORD"
    )
    # And undoproxy's own CLI says the same.
    check = subprocess.run(
        [sys.executable, "-m", "undoproxy", "rules", "check", "-c", str(folder / config_path.name)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert ": OK" in check.stdout


# --- The pods, run by Docker ----------------------------------------------------------------


# Containers start in seconds, not milliseconds: a longer wait, polled less often.
until = functools.partial(holding.until, timeout=60, every=0.2)


def resolve_env(container: Doc, values: dict[str, bytes]) -> dict[str, str]:
    env = {}
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = str(item["value"])
        else:
            env[item["name"]] = values[item["valueFrom"]["secretKeyRef"]["key"]].decode()
    return env


def security_args(spec: Doc, container: Doc) -> list[str]:
    """docker run options for the pod's and container's securityContext."""
    pod, own = spec.get("securityContext", {}), container.get("securityContext", {})
    args = ["--user", f"{pod['runAsUser']}:{pod['runAsGroup']}"]
    if "fsGroup" in pod:
        args += ["--group-add", str(pod["fsGroup"])]
    if own.get("readOnlyRootFilesystem"):
        args.append("--read-only")
    if own.get("allowPrivilegeEscalation") is False:
        args += ["--security-opt", "no-new-privileges"]
    for cap in own.get("capabilities", {}).get("drop", []):
        args += ["--cap-drop", cap]
    return args


def env_args(env: dict[str, str]) -> list[str]:
    return [arg for name, value in env.items() for arg in ("-e", f"{name}={value}")]


def probe(docker: Docker, container: str, spec: Doc) -> bool:
    """One run of an exec or tcpSocket probe, as the kubelet runs it."""
    if "exec" in spec:
        return docker("exec", container, *spec["exec"]["command"], check=False).returncode == 0
    port = spec["tcpSocket"]["port"]
    assert isinstance(port, int)
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 5):
        return True
    return False


class Pods:
    """Containers and volumes made for the pods; all removed at the end."""

    def __init__(self, docker: Docker) -> None:
        self.docker = docker
        self.containers: list[Container] = []
        self.volumes: list[str] = []

    def volume(self) -> str:
        name = self.docker.volume("undoproxy-test-kube")
        self.volumes.append(name)
        return name

    def remove(self) -> None:
        for container in self.containers:
            container.remove()
        for volume in self.volumes:
            self.docker("volume", "rm", "-f", volume, check=False)


@pytest.fixture
def pods() -> Iterator[Pods]:
    found = Pods(ready_docker())
    yield found
    found.remove()


@pytest.fixture
def api(upstream_cert: tuple[Path, Path]) -> Iterator[tuple[ThreadedServer, rest.RestState]]:
    state = rest.RestState(token=AGENT_SECRET)
    state.items = {"1": {"id": "1", "name": "Ada"}}
    server = rest.serve(state, upstream_cert)
    yield server, state
    server.stop()


def secret_folder(directory: Path, volume: Doc, values: dict[str, bytes]) -> Path:
    """A Secret volume: its items with the volume's mode, owned by root and the pod's group
    (fsGroup) as the kubelet makes them (when this test runs as root; else readable by all)."""
    directory.mkdir()
    directory.chmod(0o755)
    mode = volume["secret"].get("defaultMode", 0o644)
    for item in volume["secret"]["items"]:
        path = directory / item["path"]
        path.write_bytes(values[item["key"]])
        if os.geteuid() == 0:
            os.chown(path, 0, 10001)
            path.chmod(mode)
        else:
            path.chmod(0o444)
    return directory


def test_the_pods_as_written_run_and_act_as_one_undoproxy(
    manifests: dict[tuple[str, str], Doc],
    secret: Doc,
    pods: Pods,
    api: tuple[ThreadedServer, rest.RestState],
    tmp_path: Path,
) -> None:
    docker = pods.docker
    docker.build_once(TEST_IMAGE, tmp_path / "build.log")
    images = Compose(
        ready_compose(docker),
        COMPOSE_FILE,
        f"undoproxy-test-{uuid.uuid4().hex[:8]}",
        {**IMAGE_VARIABLES, "UNDOPROXY_DB_PASSWORD": "not-used-to-build"},
    )
    images.build(docker, {"db": TEST_POSTGRES_IMAGE})
    values = secret_values(secret)

    # PostgreSQL: the StatefulSet's container, env and volume; ready by its readiness probe.
    pg_spec = pod_spec(manifests, "StatefulSet", "undoproxy-postgres")["containers"][0]
    pg_port = free_port()
    pg_env = {**resolve_env(pg_spec, values), "PGPORT": str(pg_port)}
    pgdata = pods.volume()
    postgres = Container(
        docker,
        TEST_POSTGRES_IMAGE,
        *env_args(pg_env),
        "-v",
        f"{pgdata}:{pg_spec['volumeMounts'][0]['mountPath']}",
        command=("-c", "listen_addresses=127.0.0.1"),
    )
    pods.containers.append(postgres)
    until(lambda: probe(docker, postgres.name, pg_spec["readinessProbe"]), what="PostgreSQL ready")

    spec = pod_spec(manifests, "Deployment", "undoproxy")
    main, init = spec["containers"][0], spec["initContainers"][0]
    volumes = {v["name"]: v for v in spec["volumes"]}
    configmap = manifests[("ConfigMap", volumes["config"]["configMap"]["name"])]
    replicas: list[dict[str, Any]] = []
    for index in range(manifests[("Deployment", "undoproxy")]["spec"]["replicas"]):
        proxy_port, admin_port = free_port(), free_port()
        folder = tmp_path / f"pod-{index}"
        folder.mkdir()
        config_dir = folder / "config"
        config_dir.mkdir()
        for name, text in configmap["data"].items():
            (config_dir / name).write_text(text)
        config = yaml.safe_load(configmap["data"]["config.yaml"])
        config["proxy"]["listen"] = f"127.0.0.1:{proxy_port}"
        config["proxy"]["upstream_insecure"] = True
        config["admin"]["listen"] = f"127.0.0.1:{admin_port}"
        url = urlsplit(config["store"]["url"])
        config["store"]["url"] = url._replace(netloc=f"{url.username}@127.0.0.1:{pg_port}").geturl()
        (config_dir / "config.yaml").write_text(yaml.safe_dump(config))
        config_dir.chmod(0o755)
        for path in config_dir.iterdir():
            path.chmod(0o644)
        secret_dir = secret_folder(folder / "secret", volumes["ca"], values)
        data = pods.volume()
        mounts = {
            "config": f"{config_dir}:{{}}:ro",
            "ca": f"{secret_dir}:{{}}:ro",
            "data": f"{data}:{{}}",
        }

        def volume_args(container: Doc, mounts: dict[str, str] = mounts) -> list[str]:
            args: list[str] = []
            for mount in container["volumeMounts"]:
                if "emptyDir" in volumes[mount["name"]] and mount["name"] != "data":
                    args += ["--mount", f"type=tmpfs,destination={mount['mountPath']}"]
                else:
                    args += ["-v", mounts[mount["name"]].format(mount["mountPath"])]
            return args

        done = docker(
            "run",
            "--rm",
            "--network",
            "host",
            *security_args(spec, init),
            *volume_args(init),
            "--entrypoint",
            init["command"][0],
            TEST_IMAGE,
            *init["command"][1:],
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        pod = Container(
            docker,
            TEST_IMAGE,
            *security_args(spec, main),
            *env_args(resolve_env(main, values)),
            *volume_args(main),
            command=tuple(main["args"]),
        )
        pods.containers.append(pod)
        assert pod.wait_for_banner() == {"proxy": proxy_port, "admin": admin_port}

        def ready(p: Container = pod) -> bool:
            return probe(docker, p.name, main["readinessProbe"])

        until(ready, what=f"pod {index} ready")
        liveness = {"tcpSocket": {"port": proxy_port}}  # the probe's named port, here
        assert main["livenessProbe"]["tcpSocket"]["port"] == "proxy"
        assert probe(docker, pod.name, liveness)
        replicas.append({"pod": pod, "proxy": proxy_port, "admin": admin_port})

    token = values["admin-token"].decode()
    ca_file = tmp_path / "ca.pem"
    ca_file.write_bytes(values["mitmproxy-ca-cert.pem"])

    def admin(replica: dict[str, Any], method: str, path: str, **kwargs: Any) -> requests.Response:
        return admin_request(replica["admin"], token, method, path, **kwargs)

    first, second = replicas
    for replica in replicas:  # the Secret's CA and token, in every pod
        assert (
            admin(replica, "GET", "/ca.pem").content.strip()
            == values["mitmproxy-ca-cert.pem"].strip()
        )
        assert admin(replica, "GET", "/api/sessions").status_code == 200
        logs = replica["pod"].logs()
        assert f"journal  postgresql://undoproxy@127.0.0.1:{pg_port}/undoproxy" in logs
        assert token not in logs and values["postgres-password"].decode() not in logs

    server, state = api
    before = state.snapshot()
    session = f"k-{uuid.uuid4().hex[:8]}"
    with requests.Session() as agent:
        agent.trust_env = False
        agent.proxies = {"https": f"http://{session}:x@127.0.0.1:{first['proxy']}"}
        agent.verify = str(ca_file)  # the Secret's CA, nothing else
        agent.headers["Authorization"] = f"Bearer {AGENT_SECRET}"
        assert agent.post(f"{server.base_url}/items", json={"name": "k"}).status_code == 201
        assert agent.put(f"{server.base_url}/items/1", json={"name": "Kube"}).status_code == 200
    assert state.items != before
    # (A step's outcome is journaled just after the agent has its answer; a rollback on another
    # pod before it has heard of it would report the step still in flight.)
    until(
        lambda: (
            [
                st["status"]
                for st in admin(second, "GET", f"/api/sessions/{session}").json().get("steps", [])
            ]
            == ["succeeded", "succeeded"]
        ),
        what="the second pod sees the first pod's steps succeeded",
    )
    # The second pod rolls back what the first journaled: the credentials key is the Secret's.
    report = admin(second, "POST", f"/api/sessions/{session}/rollback", json={})
    assert report.status_code == 200, report.text
    assert report.json()["state"] == "rolled_back", report.text
    assert state.items == before
    for replica in replicas:
        assert replica["pod"].stop() == 0, replica["pod"].logs()
        assert "journal flushed" in replica["pod"].logs()

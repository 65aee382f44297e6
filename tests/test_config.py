"""Config loading: defaults, env expansion, and errors that name file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.proc import run_cli
from undoproxy.config import SETTINGS, load_config
from undoproxy.errors import ConfigErrors
from undoproxy.packs import builtin_names

ROOT = Path(__file__).resolve().parent.parent


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_no_config_means_the_contract_defaults() -> None:
    config = load_config(None)
    assert config.proxy_listen == ("127.0.0.1", 8080)
    assert config.admin_listen == ("127.0.0.1", 8081)
    assert (config.proxy_auth, config.defaults_mutations, config.defaults_compensate) == (
        "open",
        "log",
        "auto",
    )
    assert config.approvals_timeout == 300.0
    # No rules of the user's: only the built-in packs' rules, and every pack is on.
    packs = {rule.name.split("/")[0] for rule in config.rules.rules}
    assert all("/" in rule.name for rule in config.rules.rules)
    assert packs == set(builtin_names())


def test_env_expansion_and_relative_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UNDOPROXY_ADMIN_TOKEN", "from-env-0123456789")
    monkeypatch.delenv("UNSET_VAR_FOR_TEST", raising=False)
    config = load_config(
        write(
            tmp_path,
            "admin:\n  token: ${UNDOPROXY_ADMIN_TOKEN}\n"
            "store:\n  path: data/j.db\nstate_dir: ./st\n",
        )
    )
    assert config.admin_token == "from-env-0123456789"
    assert config.store_path == tmp_path / "data" / "j.db"
    assert config.state_dir == tmp_path / "st"
    unset = load_config(write(tmp_path, "admin:\n  token: ${UNSET_VAR_FOR_TEST}\n"))
    assert unset.admin_token is None  # unset => generated at start


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        (
            "proxy:\n  listen: 127.0.0.1:8080\n  auht: token\n",
            3,
            "unknown key 'proxy.auht' (did you mean 'auth'?)",
        ),
        ("proxy:\n  auth: sometimes\n", 2, "proxy.auth: expected one of open | token"),
        ("admin:\n  listen: localhost\n", 2, "admin.listen: expected host:port"),
        ("approvals:\n  timeout: soon\n", 2, "approvals.timeout: expected a duration"),
        ("defaults:\n  mutations: maybe\n", 2, "defaults.mutations: expected one of"),
        ("\n\nproxyy:\n  listen: 1\n", 3, "unknown key 'proxyy' (did you mean 'proxy'?)"),
        ("proxy: [1, 2\n", 2, "invalid YAML"),
        ("approvals:\n  notify: [ftp://x]\n", 2, "webhook URL must start with http"),
        ("proxy:\n  max_body: 8GB\n", 2, "proxy.max_body: unknown size unit 'gb'"),
        ("proxy:\n  max_body: lots\n", 2, "proxy.max_body: expected a size"),
        ("proxy:\n  max_body: 0\n", 2, "proxy.max_body: the size must be greater than zero"),
    ],
)
def test_errors_name_file_and_line(tmp_path: Path, text: str, line: int, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(Exception) as caught:
        load_config(path)
    assert f"{path}:{line}: " in str(caught.value)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("value", "size"),
    [(1, 1), ("512", 512), ("64KiB", 65536), ("40 MiB", 40 << 20), ("8GiB", 8 << 30)],
)
def test_max_body_takes_binary_sizes(tmp_path: Path, value: object, size: int) -> None:
    assert load_config(write(tmp_path, f"proxy:\n  max_body: {value}\n")).max_body == size


def test_all_errors_are_reported_at_once(tmp_path: Path) -> None:
    path = write(tmp_path, "proxy:\n  auth: x\nadmin:\n  listen: y\n")
    with pytest.raises(ConfigErrors) as caught:
        load_config(path)
    assert [e.where.line for e in caught.value.errors if e.where] == [2, 4]


def test_run_refuses_a_bad_config_and_starts_nothing(tmp_path: Path) -> None:
    path = write(tmp_path, "proxy:\n  listen: 127.0.0.1:0\n  mode: fast\n")
    run = run_cli("run", "-c", str(path))
    assert run.returncode == 2
    assert f"{path}:3: unknown key 'proxy.mode'" in run.stderr
    assert "Traceback" not in run.stderr


def test_example_config_is_valid_and_documents_every_setting() -> None:
    example = (ROOT / "config.yaml").read_text()
    load_config(ROOT / "config.yaml")
    for setting in SETTINGS:
        leaf = setting.key.split(".")[-1]
        assert f"{leaf}:" in example, f"config.yaml does not document {setting.key}"
    readme = (ROOT / "README.md").read_text()
    for setting in SETTINGS:
        assert setting.key in readme, f"README.md does not document {setting.key}"


def test_example_config_is_exactly_the_defaults_but_its_example_rules() -> None:
    """config.yaml says every setting in it is the default (only its `rules:` are examples):
    loaded, it equals the built-in defaults in everything but the rules, all packs included."""
    import dataclasses

    from undoproxy.packs.loading import load_builtin

    example, defaults = load_config(ROOT / "config.yaml"), load_config(None)
    differ = [
        f.name
        for f in dataclasses.fields(example)
        if f.name not in ("rules", "source")
        and getattr(example, f.name) != getattr(defaults, f.name)
    ]
    assert differ == []
    named = {r.name for r in example.rules.rules if "/" not in r.name}
    assert named == {
        "close-issue-instead-of-create",
        "update-contact",
        "big-charges-need-a-person",
        "never-delete-repos",
    }
    packs = {r.name.split("/")[0] for r in example.rules.rules if "/" in r.name}
    assert packs == {r.name.split("/")[0] for r in defaults.rules.rules}
    assert all(load_builtin(p) for p in packs)

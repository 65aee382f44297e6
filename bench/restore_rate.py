"""`restore_rate`: of the writes an agent makes to RPC-shaped stores, how many does rollback
restore with zero rules (the built-in packs and `signing:` keys only), and is any reported
restored that was not?

Real servers, each from its own package (tests/support/rpcservers.py, awsjson.py): etcd v3
(Debian), DynamoDB, Secrets Manager, SSM and SQS (moto's server, signatures checked), Chroma,
Datasette 1.0 and Jupyter Server (PyPI). Each operation runs in a session of its own through
one undoproxy, is rolled back, and the store is read directly before and after: an operation
is **restored** when rollback says compensated or skipped and the direct read shows the store
as before; **false** when rollback says so and the read differs (the number that must be 0).
Operations a pack holds for a person (compaction, dropping a table, deleting a collection)
are listed apart: the agent does not make them until someone approves.

    .venv/bin/python bench/restore_rate.py            # prints the table; exit 1 if false > 0
    .venv/bin/python bench/restore_rate.py --no-packs # the same with packs: [], to compare
"""

from __future__ import annotations

import base64
import json
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import requests  # noqa: E402

from tests.support.awsjson import SERVICES, MotoAws  # noqa: E402
from tests.support.certs import self_signed  # noqa: E402
from tests.support.proc import Undoproxy  # noqa: E402
from tests.support.rpcservers import Chroma, Datasette, Etcd, Jupyter  # noqa: E402

GOAL = 0.85


@dataclass
class Op:
    """One agent write: `act(session)` makes it through undoproxy; `setup()` runs first,
    straight to the server."""

    kind: str
    name: str
    act: Callable[[str], Any]
    setup: Callable[[], Any] | None = None
    held: bool = False


@dataclass
class Result:
    op: Op
    verdicts: list[str]
    same: bool

    @property
    def outcome(self) -> str:
        ok = bool(self.verdicts) and set(self.verdicts) <= {"compensated", "skipped"}
        if ok:
            return "restored" if self.same else "FALSE"
        return (
            "irreversible"
            if "irreversible" in self.verdicts
            else ("/".join(sorted(set(self.verdicts))) or "no step")
        )


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# --- the workloads -----------------------------------------------------------------------------


def etcd_ops(etcd: Etcd, up: Undoproxy) -> tuple[list[Op], Callable[[], Any]]:
    def call(session: str, what: str, body: dict[str, Any]) -> Any:
        return up.agent(session).post(f"{etcd.base_url}/v3/{what}", json=body, timeout=30)

    def direct(what: str, body: dict[str, Any]) -> Any:
        return requests.post(f"{etcd.base_url}/v3/{what}", json=body, timeout=30).json()

    def seed() -> None:
        for k, v in (("/cfg/a", "1"), ("/cfg/b", "2"), ("/cfg/c", "3")):
            direct("kv/put", {"key": b64(k), "value": b64(v)})

    lease: dict[str, str] = {}
    k = "etcd"
    ops = [
        Op(
            k,
            "put a new key",
            lambda s: call(s, "kv/put", {"key": b64("/cfg/new"), "value": b64("x")}),
            seed,
        ),
        Op(
            k,
            "put over a key",
            lambda s: call(s, "kv/put", {"key": b64("/cfg/a"), "value": b64("9")}),
            seed,
        ),
        Op(
            k,
            "put with prev_kv",
            lambda s: call(s, "kv/put", {"key": b64("/cfg/b"), "value": b64("8"), "prev_kv": True}),
            seed,
        ),
        Op(k, "delete a key", lambda s: call(s, "kv/deleterange", {"key": b64("/cfg/c")}), seed),
        Op(
            k,
            "delete a prefix",
            lambda s: call(s, "kv/deleterange", {"key": b64("/cfg/"), "range_end": b64("/cfg0")}),
            seed,
        ),
        Op(
            k,
            "delete a missing key",
            lambda s: call(s, "kv/deleterange", {"key": b64("/cfg/none")}),
            seed,
        ),
        Op(
            k,
            "txn (success branch)",
            lambda s: call(
                s,
                "kv/txn",
                {
                    "compare": [{"key": b64("/cfg/a"), "target": "VALUE", "value": b64("1")}],
                    "success": [
                        {"request_put": {"key": b64("/cfg/a"), "value": b64("t")}},
                        {"request_delete_range": {"key": b64("/cfg/b")}},
                    ],
                },
            ),
            seed,
        ),
        Op(
            k,
            "txn (failure branch)",
            lambda s: call(
                s,
                "kv/txn",
                {
                    "compare": [{"key": b64("/cfg/a"), "target": "VALUE", "value": b64("no")}],
                    "success": [{"request_put": {"key": b64("/cfg/a"), "value": b64("t")}}],
                    "failure": [{"request_put": {"key": b64("/cfg/f"), "value": b64("f")}}],
                },
            ),
            seed,
        ),
        Op(k, "lease grant", lambda s: call(s, "lease/grant", {"TTL": 600}), seed),
        Op(
            k,
            "put with a lease",
            lambda s: call(
                s, "kv/put", {"key": b64("/cfg/leased"), "value": b64("l"), "lease": lease["id"]}
            ),
            lambda: (seed(), lease.update(id=direct("lease/grant", {"TTL": 600})["ID"])),
        ),
        Op(
            k,
            "lease revoke",
            lambda s: call(s, "lease/revoke", {"ID": lease["id"]}),
            lambda: (seed(), lease.update(id=direct("lease/grant", {"TTL": 600})["ID"])),
        ),
        Op(k, "compaction", lambda s: call(s, "kv/compaction", {"revision": "1"}), seed, held=True),
    ]
    return ops, etcd.keyspace


def aws_ops(aws: MotoAws, up: Undoproxy) -> tuple[list[Op], Callable[[], Any]]:
    def client(service: str, session: str) -> Any:
        return aws.through(service, up.proxy_url(session), up.ca_bundle)

    db, sm, ssm, sqs = (aws.direct(s) for s in SERVICES)
    table = "bench-orders"

    def seed() -> None:
        if table not in db.list_tables()["TableNames"]:
            db.create_table(
                TableName=table,
                KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
                AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
                BillingMode="PAY_PER_REQUEST",
            )
        # Back to the same state before every operation, whatever the last one left.
        for item in db.scan(TableName=table)["Items"]:
            db.delete_item(TableName=table, Key={"id": item["id"]})
        for i in ("1", "2", "3"):
            db.put_item(TableName=table, Item={"id": {"S": i}, "n": {"N": i}})
        if "bench-made" in db.list_tables()["TableNames"]:
            db.delete_table(TableName="bench-made")
        listed = {s["Name"]: s for s in sm.list_secrets(IncludePlannedDeletion=True)["SecretList"]}
        if "bench/new" in listed:
            sm.delete_secret(SecretId="bench/new", ForceDeleteWithoutRecovery=True)
        if "bench/db" in listed:
            sm.delete_secret(SecretId="bench/db", ForceDeleteWithoutRecovery=True)
        sm.create_secret(Name="bench/db", SecretString="pw-1", Description="db")
        for name in ("/bench/new", "/bench/url", "/bench/token"):
            _swallow(lambda name=name: ssm.delete_parameter(Name=name))
        ssm.put_parameter(Name="/bench/url", Value="https://a", Type="String")
        ssm.put_parameter(Name="/bench/token", Value="t0k", Type="SecureString")
        for url in sqs.list_queues(QueueNamePrefix="bench").get("QueueUrls", []):
            sqs.delete_queue(QueueUrl=url)
        url = sqs.create_queue(QueueName="bench-jobs", Attributes={"VisibilityTimeout": "30"})
        queue.update(url=url["QueueUrl"])
        sqs.create_queue(QueueName="bench-empty")

    queue: dict[str, str] = {}

    def state() -> Any:
        items = sorted(json.dumps(i, sort_keys=True) for i in db.scan(TableName=table)["Items"])
        tables = sorted(db.list_tables()["TableNames"])
        secrets_ = {}
        for s in sm.list_secrets(IncludePlannedDeletion=True)["SecretList"]:
            d = sm.describe_secret(SecretId=s["ARN"])
            value = (
                None
                if "DeletedDate" in d
                else sm.get_secret_value(SecretId=s["ARN"], VersionStage="AWSCURRENT")[
                    "SecretString"
                ]
            )
            secrets_[s["Name"]] = (
                value,
                d.get("Description"),
                "DeletedDate" in d,
                sorted((t["Key"], t["Value"]) for t in d.get("Tags", [])),
            )
        params = {
            p["Name"]: (p["Value"], p["Type"])
            for p in ssm.get_parameters_by_path(Path="/bench", WithDecryption=True)["Parameters"]
        }
        queues = {}
        for url in sqs.list_queues(QueueNamePrefix="bench").get("QueueUrls", []):
            attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
            attrs = {
                k: v for k, v in attrs.items() if not k.startswith(("Approx", "Created", "LastMod"))
            }
            queues[url] = (attrs, sqs.list_queue_tags(QueueUrl=url).get("Tags", {}))
        return items, tables, secrets_, params, queues

    def send(s: str) -> Any:
        return client("sqs", s).send_message(QueueUrl=queue["url"], MessageBody="hi")

    def receive_and_delete(s: str) -> Any:
        sqs.send_message(QueueUrl=queue["url"], MessageBody="job")
        c = client("sqs", s)
        got = c.receive_message(QueueUrl=queue["url"], MaxNumberOfMessages=1)
        for m in got.get("Messages", []):
            c.delete_message(QueueUrl=queue["url"], ReceiptHandle=m["ReceiptHandle"])

    k1, k2, k3, k4 = "DynamoDB", "Secrets Manager", "SSM", "SQS"
    d = lambda s: client("dynamodb", s)  # noqa: E731
    ops = [
        Op(
            k1,
            "PutItem new",
            lambda s: d(s).put_item(TableName=table, Item={"id": {"S": "9"}}),
            seed,
        ),
        Op(
            k1,
            "PutItem over",
            lambda s: d(s).put_item(TableName=table, Item={"id": {"S": "1"}, "x": {"S": "y"}}),
            seed,
        ),
        Op(
            k1,
            "UpdateItem SET",
            lambda s: d(s).update_item(
                TableName=table,
                Key={"id": {"S": "2"}},
                UpdateExpression="SET n = :n",
                ExpressionAttributeValues={":n": {"N": "7"}},
            ),
            seed,
        ),
        Op(
            k1,
            "UpdateItem new item",
            lambda s: d(s).update_item(
                TableName=table,
                Key={"id": {"S": "8"}},
                UpdateExpression="SET n = :n",
                ExpressionAttributeValues={":n": {"N": "7"}},
            ),
            seed,
        ),
        Op(
            k1,
            "DeleteItem",
            lambda s: d(s).delete_item(TableName=table, Key={"id": {"S": "3"}}),
            seed,
        ),
        Op(
            k1,
            "DeleteItem missing",
            lambda s: d(s).delete_item(TableName=table, Key={"id": {"S": "0"}}),
            seed,
        ),
        Op(
            k1,
            "conditional put refused",
            lambda s: _swallow(
                lambda: d(s).put_item(
                    TableName=table,
                    Item={"id": {"S": "1"}},
                    ConditionExpression="attribute_not_exists(id)",
                )
            ),
            seed,
        ),
        Op(
            k1,
            "BatchWriteItem",
            lambda s: d(s).batch_write_item(
                RequestItems={
                    table: [
                        {"PutRequest": {"Item": {"id": {"S": "b1"}}}},
                        {"DeleteRequest": {"Key": {"id": {"S": "1"}}}},
                    ]
                }
            ),
            seed,
        ),
        Op(
            k1,
            "TransactWriteItems",
            lambda s: d(s).transact_write_items(
                TransactItems=[
                    {"Put": {"TableName": table, "Item": {"id": {"S": "t1"}}}},
                    {"Delete": {"TableName": table, "Key": {"id": {"S": "2"}}}},
                ]
            ),
            seed,
        ),
        Op(
            k1,
            "CreateTable",
            lambda s: d(s).create_table(
                TableName="bench-made",
                KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
                AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
                BillingMode="PAY_PER_REQUEST",
            ),
            seed,
        ),
        Op(
            k1,
            "UpdateTable",
            lambda s: d(s).update_table(
                TableName=table,
                BillingMode="PROVISIONED",
                ProvisionedThroughput={"ReadCapacityUnits": 1, "WriteCapacityUnits": 1},
            ),
            seed,
        ),
        Op(
            k2,
            "CreateSecret",
            lambda s: client("secretsmanager", s).create_secret(Name="bench/new", SecretString="n"),
            seed,
        ),
        Op(
            k2,
            "PutSecretValue",
            lambda s: client("secretsmanager", s).put_secret_value(
                SecretId="bench/db", SecretString="pw-2"
            ),
            seed,
        ),
        Op(
            k2,
            "UpdateSecret value",
            lambda s: client("secretsmanager", s).update_secret(
                SecretId="bench/db", SecretString="pw-3"
            ),
            seed,
        ),
        Op(
            k2,
            "TagResource",
            lambda s: client("secretsmanager", s).tag_resource(
                SecretId="bench/db", Tags=[{"Key": "t", "Value": "v"}]
            ),
            seed,
        ),
        Op(
            k2,
            "DeleteSecret (recovery window)",
            lambda s: client("secretsmanager", s).delete_secret(
                SecretId="bench/db", RecoveryWindowInDays=7
            ),
            seed,
        ),
        Op(
            k3,
            "PutParameter new",
            lambda s: client("ssm", s).put_parameter(Name="/bench/new", Value="n", Type="String"),
            seed,
        ),
        Op(
            k3,
            "PutParameter over",
            lambda s: client("ssm", s).put_parameter(
                Name="/bench/url", Value="https://b", Type="String", Overwrite=True
            ),
            seed,
        ),
        Op(
            k3,
            "PutParameter SecureString",
            lambda s: client("ssm", s).put_parameter(
                Name="/bench/token", Value="new", Type="SecureString", Overwrite=True
            ),
            seed,
        ),
        Op(
            k3,
            "DeleteParameter",
            lambda s: client("ssm", s).delete_parameter(Name="/bench/url"),
            seed,
        ),
        Op(
            k3,
            "DeleteParameters",
            lambda s: client("ssm", s).delete_parameters(Names=["/bench/url", "/bench/token"]),
            seed,
        ),
        Op(k4, "CreateQueue", lambda s: client("sqs", s).create_queue(QueueName="bench-new"), seed),
        Op(
            k4,
            "SetQueueAttributes",
            lambda s: client("sqs", s).set_queue_attributes(
                QueueUrl=queue["url"], Attributes={"VisibilityTimeout": "60"}
            ),
            seed,
        ),
        Op(
            k4,
            "TagQueue",
            lambda s: client("sqs", s).tag_queue(QueueUrl=queue["url"], Tags={"a": "b"}),
            seed,
        ),
        Op(
            k4,
            "DeleteQueue (empty)",
            lambda s: client("sqs", s).delete_queue(
                QueueUrl=queue["url"].replace("bench-jobs", "bench-empty")
            ),
            seed,
        ),
        Op(k4, "SendMessage", send, seed),
        Op(k4, "ReceiveMessage + DeleteMessage", receive_and_delete, seed),
    ]
    return ops, state


def _swallow(fn: Callable[[], Any]) -> None:
    try:
        fn()
    except Exception:  # the refusal is the point
        return


def chroma_ops(chroma: Chroma, up: Undoproxy) -> tuple[list[Op], Callable[[], Any]]:
    seed_script = """
for c in client.list_collections():
    client.delete_collection(c.name)
c = client.create_collection("bench-docs", metadata={"team": "a"})
c.add(ids=["a", "b", "c"], embeddings=[[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]],
      metadatas=[{"k": 1}, {"k": 2}, None], documents=["A", "B", None])
"""

    def act(script: str) -> Callable[[str], Any]:
        prelude = "c = client.get_collection('bench-docs')\n"
        return lambda s: chroma.run_client(prelude + script, up.proxy_url(s))

    def state() -> Any:
        got = requests.get(f"{chroma.api}/collections", timeout=10).json()
        cols = sorted((c["name"], json.dumps(c.get("metadata"), sort_keys=True)) for c in got)
        return cols, chroma.records("bench-docs")

    seed = lambda: chroma.run_client(seed_script)  # noqa: E731
    k = "Chroma"
    ops = [
        Op(k, "create_collection", act("client.create_collection('bench-new')"), seed),
        Op(k, "add", act("c.add(ids=['n'], embeddings=[[1.0, 1.0]], documents=['N'])"), seed),
        Op(
            k,
            "upsert existing",
            act(
                "c.upsert(ids=['a'], embeddings=[[9.0, 9.0]], metadatas=[{'k': 9, 'z': 1}],"
                " documents=['A2'])"
            ),
            seed,
        ),
        Op(
            k,
            "upsert new",
            act("c.upsert(ids=['u'], embeddings=[[2.0, 2.0]], documents=['U'])"),
            seed,
        ),
        Op(k, "update metadata", act("c.update(ids=['b'], metadatas=[{'k': 5}])"), seed),
        Op(k, "delete ids", act("c.delete(ids=['a', 'c'])"), seed),
        Op(k, "delete where", act("c.delete(where={'k': 2})"), seed),
        Op(k, "modify metadata", act("c.modify(metadata={'team': 'b'})"), seed),
        Op(k, "modify name", act("c.modify(name='bench-renamed')"), seed),
        Op(k, "delete_collection", act("client.delete_collection('bench-docs')"), seed, held=True),
    ]
    return ops, state


def datasette_ops(ds: Datasette, up: Undoproxy) -> tuple[list[Op], Callable[[], Any]]:
    def seed() -> None:
        ds.sql(
            "drop table if exists notes; drop table if exists made;"
            "create table notes (id integer primary key, title text, body text);"
            "insert into notes values (1, 'a', 'x'), (2, 'b', null);"
        )

    def post(path: str, body: dict[str, Any]) -> Callable[[str], Any]:
        def go(session: str) -> Any:
            agent = up.agent(session, headers={"Authorization": f"Bearer {ds.token}"})
            return agent.post(f"{ds.base_url}/data/{path}", json=body, timeout=30)

        return go

    k = "Datasette"
    ops = [
        Op(k, "insert a row", post("notes/-/insert", {"row": {"title": "n"}}), seed),
        Op(
            k,
            "insert rows, return",
            post("notes/-/insert", {"rows": [{"title": "p"}, {"title": "q"}], "return": True}),
            seed,
        ),
        Op(
            k,
            "insert rows with keys",
            post("notes/-/insert", {"rows": [{"id": 7, "title": "p"}, {"id": 8, "title": "q"}]}),
            seed,
        ),
        Op(
            k,
            "insert rows, no keys, no return",
            post("notes/-/insert", {"rows": [{"title": "p"}, {"title": "q"}]}),
            seed,
        ),
        Op(
            k,
            "insert replace",
            post("notes/-/insert", {"rows": [{"id": 1, "title": "R"}], "replace": True}),
            seed,
        ),
        Op(
            k,
            "upsert",
            post("notes/-/upsert", {"rows": [{"id": 2, "title": "U"}, {"id": 5, "title": "five"}]}),
            seed,
        ),
        Op(k, "update", post("notes/1/-/update", {"update": {"body": "changed"}}), seed),
        Op(k, "delete", post("notes/2/-/delete", {}), seed),
        Op(
            k,
            "create table",
            post("-/create", {"table": "made", "row": {"id": 1}, "pk": "id"}),
            seed,
        ),
        Op(k, "drop table", post("notes/-/drop", {"confirm": True}), seed, held=True),
    ]
    return ops, lambda: (ds.table("notes"), ds.table("made"))


def jupyter_ops(jp: Jupyter, up: Undoproxy) -> tuple[list[Op], Callable[[], Any]]:
    base = f"{jp.base_url}/api/contents"
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": []}

    def seed() -> None:
        d = requests.Session()
        d.headers.update(jp.auth)
        root = jp.dir / "root" / "bench"
        if root.exists():
            import shutil

            shutil.rmtree(root)
        d.put(f"{base}/bench", json={"type": "directory"})
        d.put(f"{base}/bench/a.txt", json={"type": "file", "format": "text", "content": "a\n"})
        d.put(f"{base}/bench/n.ipynb", json={"type": "notebook", "content": nb})

    def call(method: str, path: str, body: Any = None) -> Callable[[str], Any]:
        def go(session: str) -> Any:
            agent = up.agent(session, headers=jp.auth)
            return agent.request(method, f"{base}/{path}", json=body, timeout=30)

        return go

    k = "Jupyter"
    changed = {**nb, "metadata": {"k": 1}}
    ops = [
        Op(
            k,
            "save a file",
            call("PUT", "bench/a.txt", {"type": "file", "format": "text", "content": "b\n"}),
            seed,
        ),
        Op(
            k,
            "save a notebook",
            call("PUT", "bench/n.ipynb", {"type": "notebook", "content": changed}),
            seed,
        ),
        Op(
            k,
            "create a file",
            call("PUT", "bench/new.txt", {"type": "file", "format": "text", "content": "n"}),
            seed,
        ),
        Op(k, "make a directory", call("PUT", "bench/sub", {"type": "directory"}), seed),
        Op(k, "rename", call("PATCH", "bench/a.txt", {"path": "bench/b.txt"}), seed),
        Op(k, "delete a file", call("DELETE", "bench/a.txt"), seed),
        Op(k, "new untitled notebook", call("POST", "bench", {"type": "notebook"}), seed),
        Op(k, "copy a file", call("POST", "bench", {"copy_from": "bench/a.txt"}), seed),
        Op(k, "create a checkpoint", call("POST", "bench/a.txt/checkpoints"), seed),
    ]
    return ops, jp.tree


def postgrest_ops(fake: Any, server: Any, up: Undoproxy) -> tuple[list[Op], Callable[[], Any]]:
    from postgrest import SyncPostgrestClient
    from postgrest.types import ReturnMethod

    from tests.support.postgrest import dump

    def seed() -> None:
        with fake.db() as con:
            con.executescript(
                "drop table if exists todos;"
                "create table todos (id integer primary key, task text, done integer);"
                "insert into todos values (1, 'write', 0), (2, 'test', 0), (3, 'ship', 1);"
            )

    def db(session: str) -> Any:
        return SyncPostgrestClient(
            server.base_url, headers={"Authorization": "Bearer bench"}, proxy=up.proxy_url(session)
        ).from_("todos")

    k = "PostgREST"
    ops = [
        Op(k, "insert a row", lambda s: db(s).insert({"task": "n"}).execute(), seed),
        Op(
            k,
            "insert rows with ids",
            lambda s: db(s).insert([{"id": 8}, {"id": 9}]).execute(),
            seed,
        ),
        Op(
            k,
            "insert, return=minimal",
            lambda s: db(s).insert({"task": "m"}, returning=ReturnMethod.minimal).execute(),
            seed,
        ),
        Op(
            k, "update by filter", lambda s: db(s).update({"done": 1}).eq("done", 0).execute(), seed
        ),
        Op(
            k,
            "upsert",
            lambda s: db(s).upsert([{"id": 2, "task": "T"}, {"id": 7, "task": "new"}]).execute(),
            seed,
        ),
        Op(k, "delete by filter", lambda s: db(s).delete().eq("done", 1).execute(), seed),
        Op(k, "delete nothing", lambda s: db(s).delete().eq("task", "none").execute(), seed),
    ]
    return ops, lambda: dump(fake, "todos")


# --- the run -------------------------------------------------------------------------------------


def run_op(op: Op, up: Undoproxy, state: Callable[[], Any], n: int) -> Result:
    if op.setup:
        op.setup()
    before = state()
    session = f"rate-{n}"
    try:
        op.act(session)
    except Exception:  # a held request denied, an API's refusal: rollback still decides
        if not op.held:
            print(f"  ({op.kind} {op.name}: the agent's call raised)", file=sys.stderr)
    report = up.rollback(session)
    after = state()
    return Result(op, [str(s["status"]) for s in report["steps"]], before == after)


def main(argv: list[str]) -> int:
    """`--no-packs`: the same workload with `packs: []` (the REST inference alone), to compare."""
    no_packs = "--no-packs" in argv
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="restore-rate-") as tmp:
        work = Path(tmp)
        (work / "cert").mkdir()
        cert = self_signed(work / "cert")
        servers: list[Any] = [
            Etcd(work / "etcd"),
            Chroma(work / "chroma"),
            Datasette(work / "datasette"),
            Jupyter(work / "jupyter"),
        ]
        aws = MotoAws(cert)
        stoppers: list[Callable[[], Any]] = []
        try:
            for s in servers:
                s.start()
            aws.start()
            from tests.support.postgrest import serve

            (work / "postgrest").mkdir()
            fake, pg = serve(work / "postgrest", "bench")
            stoppers.append(pg.stop)
            key_id, secret = aws.keys["undoproxy"]
            config = aws.config("RATE_KEY", "RATE_SECRET")
            config["packs"] += ["etcd", "chroma", "datasette", "jupyter"]
            config["packs"].append({"name": "postgrest", "hosts": [f"127.0.0.1:{pg.port}"]})
            config["approvals"] = {"timeout": "1s"}
            if no_packs:
                config["packs"] = []
            up = Undoproxy(work / "proxy", config, env={"RATE_KEY": key_id, "RATE_SECRET": secret})
            up.start()
            try:
                etcd, chroma, ds, jp = servers
                n = 0
                for ops, state in (
                    etcd_ops(etcd, up),
                    aws_ops(aws, up),
                    chroma_ops(chroma, up),
                    datasette_ops(ds, up),
                    postgrest_ops(fake, pg, up),
                    jupyter_ops(jp, up),
                ):
                    for op in ops:
                        n += 1
                        results.append(run_op(op, up, state, n))
            finally:
                up.stop()
        finally:
            aws.stop()
            for s in servers:
                s.stop()
            for stop in stoppers:
                stop()
    return report(results)


def report(results: list[Result]) -> int:
    made = [r for r in results if not r.op.held]
    print(f"{'STORE':16} {'OPERATION':34} {'VERDICT':24} OUTCOME")
    for r in results:
        tag = "held (not made)" if r.op.held else r.outcome
        print(f"{r.op.kind:16} {r.op.name[:34]:34} {','.join(r.verdicts)[:24]:24} {tag}")
    print()
    kinds = list(dict.fromkeys(r.op.kind for r in made))
    print(
        f"{'STORE':16} {'WRITES':>6} {'RESTORED':>8} {'IRREVERSIBLE':>12} {'OTHER':>5} {'FALSE':>5}"
    )
    for kind in [*kinds, "all"]:
        rows = made if kind == "all" else [r for r in made if r.op.kind == kind]
        restored = sum(r.outcome == "restored" for r in rows)
        irreversible = sum(r.outcome == "irreversible" for r in rows)
        false = sum(r.outcome == "FALSE" for r in rows)
        other = len(rows) - restored - irreversible - false
        print(f"{kind:16} {len(rows):>6} {restored:>8} {irreversible:>12} {other:>5} {false:>5}")
    restored = sum(r.outcome == "restored" for r in made)
    false = sum(r.outcome == "FALSE" for r in made)
    rate = restored / len(made) if made else 0.0
    print(
        f"\nrestored {restored} of {len(made)} writes ({rate:.0%}; goal {GOAL:.0%}); "
        f"reported restored but not: {false}"
    )
    return 1 if false or rate < GOAL else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Rollback of AWS JSON-protocol writes (DynamoDB, Secrets Manager, SSM Parameter Store, SQS)
made by boto3 through undoproxy, against moto's server checking every SigV4 signature.

Zero rules: the four packs on their endpoints and a `signing:` key per endpoint (another IAM
user's). Every call is `POST /` whose X-Amz-Target names the action: undoproxy reads before
each write with another action (DescribeTable and GetItem, GetSecretValue, GetParameter,
GetQueueAttributes), signed with its own key, and proves each undo with such a read. Each test
reads the truth directly from the server before and after.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.rollback.helpers import details, rollback_ends, statuses
from tests.support.ci import skip_or_fail
from tests.support.proc import Undoproxy

try:
    from tests.support.awsjson import MotoAws
except ImportError:  # pragma: no cover
    skip_or_fail("moto[server] is not installed (pip install -e '.[test]')", module=True)

KEY_ENV, SECRET_ENV = "UNDOPROXY_TEST_AWS_KEY_ID", "UNDOPROXY_TEST_AWS_SECRET"


@pytest.fixture(scope="module")
def aws(upstream_cert: tuple[Path, Path]) -> Iterator[MotoAws]:
    server = MotoAws(upstream_cert).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory, aws: MotoAws) -> Iterator[Undoproxy]:
    key_id, secret = aws.keys["undoproxy"]
    instance = Undoproxy(
        tmp_path_factory.mktemp("aws-json"),
        aws.config(KEY_ENV, SECRET_ENV),
        env={KEY_ENV: key_id, SECRET_ENV: secret},
    ).start()
    yield instance
    instance.stop()


def agent(aws: MotoAws, up: Undoproxy, service: str, session: str) -> Any:
    return aws.through(service, up.proxy_url(session), up.ca_bundle)


# --- DynamoDB -----------------------------------------------------------------------------------


def table_state(db: Any, table: str) -> list[dict[str, Any]]:
    items = db.scan(TableName=table, ConsistentRead=True)["Items"]
    return sorted(items, key=lambda i: (i["pk"]["S"], i["sk"]["N"]))


@pytest.fixture
def table(aws: MotoAws, session_id: str) -> str:
    """A table with a composite key (pk, sk) and three items."""
    db = aws.direct("dynamodb")
    name = f"orders-{session_id}"
    db.create_table(
        TableName=name,
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "N"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    for pk, sk, status in (("ada", "1", "new"), ("ada", "2", "paid"), ("bob", "1", "new")):
        item = {"pk": {"S": pk}, "sk": {"N": sk}, "status": {"S": status}, "tags": {"SS": ["x"]}}
        db.put_item(TableName=name, Item=item)
    return name


def test_dynamodb_item_writes_batches_and_transactions_are_undone(
    aws: MotoAws, up: Undoproxy, table: str, session_id: str
) -> None:
    db = aws.direct("dynamodb")
    before = table_state(db, table)
    a = agent(aws, up, "dynamodb", session_id)
    key = {"pk": {"S": "ada"}, "sk": {"N": "1"}}
    a.put_item(TableName=table, Item={**key, "status": {"S": "overwritten"}})  # overwrite
    a.put_item(TableName=table, Item={"pk": {"S": "cy"}, "sk": {"N": "9"}})  # create
    a.update_item(
        TableName=table,
        Key={"pk": {"S": "ada"}, "sk": {"N": "2"}},
        UpdateExpression="SET #s = :s, extra = :e",
        ExpressionAttributeNames={"#s": "status"},
        ExpressionAttributeValues={":s": {"S": "refunded"}, ":e": {"N": "1"}},
    )
    a.delete_item(TableName=table, Key={"pk": {"S": "bob"}, "sk": {"N": "1"}})  # existing
    a.delete_item(TableName=table, Key={"pk": {"S": "nobody"}, "sk": {"N": "0"}})  # nothing
    a.batch_write_item(
        RequestItems={
            table: [
                {"PutRequest": {"Item": {"pk": {"S": "dee"}, "sk": {"N": "1"}}}},
                {"PutRequest": {"Item": {"pk": {"S": "dee"}, "sk": {"N": "2"}}}},
                {"DeleteRequest": {"Key": {"pk": {"S": "ada"}, "sk": {"N": "2"}}}},
            ]
        }
    )
    a.transact_write_items(
        TransactItems=[
            {"Put": {"TableName": table, "Item": {"pk": {"S": "eve"}, "sk": {"N": "1"}}}},
            {
                "Update": {
                    "TableName": table,
                    "Key": key,
                    "UpdateExpression": "REMOVE tags",
                }
            },
            {"Delete": {"TableName": table, "Key": {"pk": {"S": "dee"}, "sk": {"N": "1"}}}},
        ]
    )
    made = f"scratch-{session_id}"
    a.create_table(
        TableName=made,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    assert table_state(db, table) != before

    report = rollback_ends(
        up, session_id, "rolled_back", ["compensated"] * 3 + ["skipped"] + ["compensated"] * 4
    )
    assert "read back: 3 targets as before" in details(report)[1]  # the batch, item by item
    assert details(report)[3].startswith("a read just before the write found none")
    assert report["steps"][0]["evidence"]["read"].startswith("POST ")
    assert table_state(db, table) == before
    assert made not in db.list_tables()["TableNames"]


def test_dynamodb_an_item_changed_since_the_agent_is_not_overwritten(
    aws: MotoAws, up: Undoproxy, table: str, session_id: str
) -> None:
    db = aws.direct("dynamodb")
    key = {"pk": {"S": "ada"}, "sk": {"N": "1"}}
    agent(aws, up, "dynamodb", session_id).put_item(
        TableName=table, Item={**key, "status": {"S": "agent"}}
    )
    db.put_item(TableName=table, Item={**key, "status": {"S": "someone else"}})
    rollback_ends(up, session_id, "rollback_incomplete", ["conflict"])
    assert db.get_item(TableName=table, Key=key)["Item"]["status"] == {"S": "someone else"}


def test_without_a_signing_key_a_signed_write_is_irreversible_and_says_which_key(
    aws: MotoAws, tmp_path: Path, table: str, session_id: str
) -> None:
    config = {"packs": [{"name": "dynamodb", "hosts": [aws.host("dynamodb")]}]}
    plain = Undoproxy(tmp_path, config).start()
    try:
        agent(aws, plain, "dynamodb", session_id).put_item(
            TableName=table, Item={"pk": {"S": "zed"}, "sk": {"N": "1"}}
        )
        report = rollback_ends(plain, session_id, "rollback_incomplete", ["irreversible"])
        assert "signing:" in details(report)[0] and "service: dynamodb" in details(report)[0]
    finally:
        plain.stop()


# --- Secrets Manager ----------------------------------------------------------------------------


def secret_state(sm: Any, name: str) -> dict[str, Any] | None:
    try:
        described = sm.describe_secret(SecretId=name)
    except sm.exceptions.ResourceNotFoundException:
        return None
    if "DeletedDate" in described:
        return {"deleted": True}
    # The version staged AWSCURRENT is the value (moto's default read ignores a stage moved by
    # UpdateSecretVersionStage; AWS's does not).
    value = sm.get_secret_value(SecretId=name, VersionStage="AWSCURRENT")
    return {
        "value": value.get("SecretString"),
        "version": value["VersionId"],
        "description": described.get("Description"),
        "tags": sorted((t["Key"], t["Value"]) for t in described.get("Tags", [])),
        "deleted": "DeletedDate" in described,
    }


def test_secrets_manager_values_creation_deletion_and_tags_are_undone(
    aws: MotoAws, up: Undoproxy, session_id: str
) -> None:
    sm = aws.direct("secretsmanager")
    name, other = f"db-password-{session_id}", f"api-key-{session_id}"
    sm.create_secret(
        Name=name, SecretString="hunter2", Description="db", Tags=[{"Key": "team", "Value": "a"}]
    )
    sm.create_secret(Name=other, SecretString="k1")
    before = {n: secret_state(sm, n) for n in (name, other)}
    a = agent(aws, up, "secretsmanager", session_id)
    a.put_secret_value(SecretId=name, SecretString="agent-wrote-this")
    a.update_secret(SecretId=name, SecretString="and-this")
    a.tag_resource(SecretId=name, Tags=[{"Key": "team", "Value": "b"}, {"Key": "x", "Value": "y"}])
    a.delete_secret(SecretId=other, RecoveryWindowInDays=7)
    made = f"new-{session_id}"
    a.create_secret(Name=made, SecretString="fresh")
    assert {n: secret_state(sm, n) for n in (name, other)} != before

    rollback_ends(up, session_id, "rolled_back", ["compensated"] * 5)
    assert {n: secret_state(sm, n) for n in (name, other)} == before
    assert secret_state(sm, made) is None


# --- SSM Parameter Store ------------------------------------------------------------------------


def parameters(ssm: Any, names: list[str]) -> dict[str, tuple[str, str]]:
    got = ssm.get_parameters(Names=names, WithDecryption=True)["Parameters"]
    return {p["Name"]: (p["Value"], p["Type"]) for p in got}


def test_ssm_parameters_put_and_deleted_are_undone(
    aws: MotoAws, up: Undoproxy, session_id: str
) -> None:
    ssm = aws.direct("ssm")
    base = f"/{session_id}"
    ssm.put_parameter(Name=f"{base}/url", Value="https://old", Type="String")
    ssm.put_parameter(Name=f"{base}/token", Value="s3cret", Type="SecureString")
    ssm.put_parameter(Name=f"{base}/list", Value="a,b", Type="StringList")
    names = [f"{base}/{n}" for n in ("url", "token", "list", "new")]
    before = parameters(ssm, names)
    a = agent(aws, up, "ssm", session_id)
    a.put_parameter(Name=f"{base}/url", Value="https://agent", Type="String", Overwrite=True)
    a.put_parameter(Name=f"{base}/new", Value="made", Type="String")
    a.delete_parameter(Name=f"{base}/token")
    a.delete_parameters(Names=[f"{base}/list", f"{base}/missing"])
    assert parameters(ssm, names) != before

    rollback_ends(up, session_id, "rolled_back", ["compensated"] * 4)
    assert parameters(ssm, names) == before


# --- SQS ------------------------------------------------------------------------------------


def queues(sqs: Any, prefix: str) -> dict[str, Any]:
    urls = sqs.list_queues(QueueNamePrefix=prefix).get("QueueUrls", [])
    out = {}
    for url in urls:
        attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        keep = {k: v for k, v in attrs.items() if not k.startswith(("Approximate", "Created"))}
        keep.pop("LastModifiedTimestamp", None)
        tags = sqs.list_queue_tags(QueueUrl=url).get("Tags", {})
        out[url.rsplit("/", 1)[1]] = (keep, tags)
    return out


def test_sqs_queues_attributes_and_tags_are_undone_and_sends_are_irreversible(
    aws: MotoAws, up: Undoproxy, session_id: str
) -> None:
    sqs = aws.direct("sqs")
    prefix = f"q-{session_id}"
    kept = sqs.create_queue(
        QueueName=f"{prefix}-jobs", Attributes={"VisibilityTimeout": "30"}, tags={"team": "a"}
    )["QueueUrl"]
    empty = sqs.create_queue(
        QueueName=f"{prefix}-old", Attributes={"DelaySeconds": "5"}, tags={"owner": "ops"}
    )["QueueUrl"]
    before = queues(sqs, prefix)
    a = agent(aws, up, "sqs", session_id)
    a.set_queue_attributes(
        QueueUrl=kept, Attributes={"VisibilityTimeout": "99", "MaximumMessageSize": "2048"}
    )
    a.tag_queue(QueueUrl=kept, Tags={"team": "b", "new": "1"})
    a.create_queue(QueueName=f"{prefix}-made")
    a.delete_queue(QueueUrl=empty)
    a.send_message(QueueUrl=kept, MessageBody="hello")
    assert queues(sqs, prefix) != before

    report = up.rollback(session_id)
    assert statuses(report) == ["irreversible"] + ["compensated"] * 4, report
    assert "cannot be unsent" in details(report)[0]
    assert queues(sqs, prefix) == before


def test_dynamodb_a_write_answered_with_an_error_is_decided_by_reading_it_back(
    aws: MotoAws, up: Undoproxy, table: str, session_id: str
) -> None:
    """A conditional put the table refused: the error is no evidence by itself; the item read
    back as it was before is."""
    db = aws.direct("dynamodb")
    before = table_state(db, table)
    a = agent(aws, up, "dynamodb", session_id)
    with pytest.raises(a.exceptions.ConditionalCheckFailedException):
        a.put_item(
            TableName=table,
            Item={"pk": {"S": "ada"}, "sk": {"N": "1"}, "status": {"S": "agent"}},
            ConditionExpression="attribute_not_exists(pk)",
        )
    report = rollback_ends(up, session_id, "rolled_back", ["skipped"])
    assert "read back, the target is as it was before the step" in details(report)[0]
    assert report["steps"][0]["evidence"]["read"].startswith("POST ")
    assert table_state(db, table) == before

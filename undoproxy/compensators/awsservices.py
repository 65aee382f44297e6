"""Secrets Manager, SSM Parameter Store and SQS compensators (pure; see awsjson.py).

Secrets Manager
    CreateSecret          DeleteSecret (without recovery window: it is the agent's); read back:
                          DescribeSecret says not found
    PutSecretValue,       the version that was current made current again
    UpdateSecret          (UpdateSecretVersionStage AWSCURRENT), and the description put back;
                          read back: GetSecretValue shows the old VersionId and value
    DeleteSecret          with a recovery window: RestoreSecret (read back: no DeletedDate);
                          ForceDeleteWithoutRecovery: irreversible
    TagResource,
    UntagResource         the tags as they were
SSM Parameter Store
    PutParameter          the old value and type put back (a new version), or DeleteParameter
                          when it created the parameter; read back: GetParameter
    DeleteParameter(s)    PutParameter with the old value and type, per name
SQS (sends, receives' deletes and purges are irreversible: the pack says so)
    CreateQueue           DeleteQueue (a CreateQueue of a queue that existed changes nothing)
    DeleteQueue           CreateQueue with its attributes and tags, when it held no message
    SetQueueAttributes    the old values set back
    TagQueue, UntagQueue  the tags as they were
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from undoproxy.compensators import awsjson, readback
from undoproxy.compensators.model import Facts, Irreversible, NothingToUndo, PreRead

MAX_NAMES = 10  # DeleteParameters takes at most 10 names


def _text(doc: dict[str, Any], key: str, what: str) -> str:
    value = doc.get(key)
    if not isinstance(value, str) or not value:
        raise Irreversible(f"the {what} names no {key}")
    return value


def _with_then(requests: list[dict[str, Any]]) -> dict[str, Any]:
    out = dict(requests[0])
    if len(requests) > 1:
        out["then"] = requests[1:]
    return out


def _tag_undo(
    facts: Facts, before: dict[str, str], keys: list[str], tag: str, untag: str, ident: Any
) -> list[dict[str, Any]]:
    """The tag calls that put `keys` back as `before` had them (untag what was not there)."""
    gone = [k for k in keys if k not in before]
    back = {k: before[k] for k in keys if k in before}
    out = []
    if gone:
        out.append(awsjson.call(facts, untag, {**ident, "TagKeys": gone}))
    if back:
        if tag == "TagQueue":
            out.append(awsjson.call(facts, tag, {**ident, "Tags": back}))
        else:
            tags = [{"Key": k, "Value": v} for k, v in back.items()]
            out.append(awsjson.call(facts, tag, {**ident, "Tags": tags}))
    return out


# --- Secrets Manager ---------------------------------------------------------------------------


def _secret_id(facts: Facts) -> str:
    return _text(awsjson.body(facts), "SecretId", awsjson.action(facts))


def secret_reads(facts: Facts) -> list[PreRead]:
    """The secret's description, tags and deletion (DescribeSecret) and current value."""
    act = awsjson.action(facts)
    if act == "CreateSecret":
        name = _text(awsjson.body(facts), "Name", act)
        return [awsjson.pre_read(facts, "describe", "DescribeSecret", {"SecretId": name})]
    ident = {"SecretId": _secret_id(facts)}
    out = [awsjson.pre_read(facts, "describe", "DescribeSecret", ident)]
    if act in ("PutSecretValue", "UpdateSecret"):
        current = {**ident, "VersionStage": "AWSCURRENT"}
        out.append(awsjson.pre_read(facts, "value", "GetSecretValue", current))
    return out


def _value_check(facts: Facts, ident: dict[str, str], value: Any) -> dict[str, Any]:
    # The value a client reads is the version staged AWSCURRENT: named, not left to default.
    check = awsjson.read_back(facts, "GetSecretValue", {**ident, "VersionStage": "AWSCURRENT"})
    if value is None:
        check["gone"] = True
        return check
    check["expect"] = [readback.expect(["VersionId"], value.get("VersionId"))] + [
        readback.same_digest([f], value.get(f)) for f in ("SecretString", "SecretBinary")
    ]  # the value itself is never stored in clear: only its digest
    return check


def undo_secret(facts: Facts) -> dict[str, Any]:
    """Secrets Manager writes (see the module docstring)."""
    act = awsjson.action(facts)
    body = awsjson.body(facts)
    answer = facts.response_json if isinstance(facts.response_json, dict) else {}
    if act == "CreateSecret":
        name = _text(body, "Name", act)
        if awsjson.answer(facts, "describe") is not None:
            raise NothingToUndo("the secret existed before: CreateSecret changed nothing", "read")
        arn = answer.get("ARN") or name
        out = awsjson.call(
            facts, "DeleteSecret", {"SecretId": arn, "ForceDeleteWithoutRecovery": True}
        )
        check = awsjson.read_back(facts, "DescribeSecret", {"SecretId": arn})
        check["gone"] = True
        out["readback"] = check
        out["repeatable"] = True
        return out
    ident = {"SecretId": _secret_id(facts)}
    described = awsjson.answer(facts, "describe")
    if described is None:
        raise NothingToUndo("the secret did not exist before the call", "read")
    if act == "DeleteSecret":
        if body.get("ForceDeleteWithoutRecovery"):
            raise Irreversible("the secret was deleted without a recovery window: it is gone")
        out = awsjson.call(facts, "RestoreSecret", ident)
        check = awsjson.read_back(facts, "DescribeSecret", ident)
        check["expect"] = [readback.expect(["DeletedDate"], described.get("DeletedDate"))]
        out["readback"] = check
        out["repeatable"] = True
        return out
    if act in ("TagResource", "UntagResource"):
        before = {
            str(t.get("Key")): str(t.get("Value"))
            for t in described.get("Tags") or []
            if isinstance(t, dict)
        }
        keys = (
            [t.get("Key") for t in body.get("Tags") or [] if isinstance(t, dict)]
            if act == "TagResource"
            else list(body.get("TagKeys") or [])
        )
        calls = _tag_undo(
            facts, before, [str(k) for k in keys], "TagResource", "UntagResource", ident
        )
        if not calls:
            raise NothingToUndo("the call names no tag", "request")
        out = _with_then(calls)
        check = awsjson.read_back(facts, "DescribeSecret", ident)
        check["expect"] = [
            readback.expect(["Tags", "*"], [{"Key": k, "Value": v} for k, v in before.items()])
        ]
        out["readback"] = check
        out["repeatable"] = True
        return out
    # PutSecretValue, UpdateSecret: a new version became current
    old = awsjson.answer(facts, "value")
    new_version = answer.get("VersionId")
    requests: list[dict[str, Any]] = []
    targets: list[dict[str, Any]] = []
    changes_value = act == "PutSecretValue" or "SecretString" in body or "SecretBinary" in body
    if changes_value:
        if not isinstance(new_version, str):
            raise Irreversible(f"the {act} answer names no VersionId")
        stage: dict[str, Any] = {**ident, "VersionStage": "AWSCURRENT"}
        stage["RemoveFromVersionId"] = new_version
        if old is not None:
            stage["MoveToVersionId"] = old.get("VersionId")
        requests.append(awsjson.call(facts, "UpdateSecretVersionStage", stage))
        targets.append(_value_check(facts, ident, old))
    if act == "UpdateSecret" and "Description" in body:
        description = described.get("Description") or ""
        requests.append(awsjson.call(facts, "UpdateSecret", {**ident, "Description": description}))
        check = awsjson.read_back(facts, "DescribeSecret", ident)
        check["expect"] = [readback.expect(["Description"], described.get("Description"))]
        targets.append(check)
    if not requests:
        raise Irreversible(f"no compensation is known for what this {act} changes")
    out = _with_then(requests)
    out["readback"] = {"targets": targets}
    out["repeatable"] = True
    out["target"] = "secretsmanager " + ident["SecretId"]
    return out


# --- SSM Parameter Store -------------------------------------------------------------------------


def _parameter_names(facts: Facts) -> list[str]:
    body = awsjson.body(facts)
    if awsjson.action(facts) == "DeleteParameters":
        names = [n for n in body.get("Names") or [] if isinstance(n, str)]
        if not names or len(names) > MAX_NAMES:
            raise Irreversible(f"DeleteParameters names 1 to {MAX_NAMES} parameters")
        return names
    return [_text(body, "Name", awsjson.action(facts))]


def parameter_reads(facts: Facts) -> list[PreRead]:
    """Each parameter as it is (decrypted: a SecureString is put back as it was)."""
    return [
        awsjson.pre_read(
            facts, f"parameter {n}", "GetParameter", {"Name": n, "WithDecryption": True}
        )
        for n in _parameter_names(facts)
    ]


def _parameter_check(facts: Facts, name: str, old: Any) -> dict[str, Any]:
    check = awsjson.read_back(facts, "GetParameter", {"Name": name, "WithDecryption": True})
    if old is None:
        check["gone"] = True
        return check
    check["expect"] = [
        readback.expect(["Parameter", f], old.get(f)) for f in ("Type", "DataType")
    ] + [readback.same_digest(["Parameter", "Value"], old.get("Value"))]
    return check


def undo_parameters(facts: Facts) -> dict[str, Any]:
    """PutParameter, DeleteParameter, DeleteParameters: each parameter as it was."""
    act = awsjson.action(facts)
    answer = facts.response_json if isinstance(facts.response_json, dict) else {}
    failed = set(answer.get("InvalidParameters") or []) if act == "DeleteParameters" else set()
    requests: list[dict[str, Any]] = []
    targets: list[dict[str, Any]] = []
    for name in _parameter_names(facts):
        doc = awsjson.answer(facts, f"parameter {name}")
        old = doc.get("Parameter") if isinstance(doc, dict) else None
        targets.append(_parameter_check(facts, name, old))
        if name in failed:
            continue
        if old is not None:
            put = {"Name": name, "Value": old.get("Value"), "Type": old.get("Type")}
            put["Overwrite"] = True
            if old.get("DataType"):
                put["DataType"] = old["DataType"]
            requests.append(awsjson.call(facts, "PutParameter", put))
        elif act == "PutParameter":
            requests.append(awsjson.call(facts, "DeleteParameter", {"Name": name}))
    if not requests:
        raise NothingToUndo("a read just before the call found none of its parameters", "read")
    out = _with_then(requests)
    out["readback"] = {"targets": targets}
    out["repeatable"] = True
    out["target"] = "ssm " + " ".join(_parameter_names(facts))
    return out


# --- SQS ------------------------------------------------------------------------------------


def _queue_url(facts: Facts) -> str:
    return _text(awsjson.body(facts), "QueueUrl", awsjson.action(facts))


def queue_reads(facts: Facts) -> list[PreRead]:
    """The queue: whether it exists (CreateQueue), its attributes and tags."""
    act = awsjson.action(facts)
    if act == "CreateQueue":
        name = _text(awsjson.body(facts), "QueueName", act)
        return [awsjson.pre_read(facts, "url", "GetQueueUrl", {"QueueName": name})]
    ident = {"QueueUrl": _queue_url(facts)}
    out = [
        awsjson.pre_read(
            facts, "attributes", "GetQueueAttributes", {**ident, "AttributeNames": ["All"]}
        )
    ]
    if act in ("DeleteQueue", "TagQueue", "UntagQueue"):
        out.append(awsjson.pre_read(facts, "tags", "ListQueueTags", ident))
    return out


# Attributes SQS computes (never set by CreateQueue or SetQueueAttributes).
_COMPUTED = frozenset(
    {
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
        "CreatedTimestamp",
        "LastModifiedTimestamp",
        "QueueArn",
        "SqsManagedSseEnabled",
    }
)


def _attributes_check(facts: Facts, ident: dict[str, str], attrs: dict[str, Any]) -> dict[str, Any]:
    check = awsjson.read_back(facts, "GetQueueAttributes", {**ident, "AttributeNames": ["All"]})
    check["expect"] = [readback.expect(["Attributes", k], v) for k, v in sorted(attrs.items())]
    return check


def undo_queue(facts: Facts) -> dict[str, Any]:
    """SQS queue writes (see the module docstring)."""
    act = awsjson.action(facts)
    body = awsjson.body(facts)
    answer = facts.response_json if isinstance(facts.response_json, dict) else {}
    if act == "CreateQueue":
        if awsjson.answer(facts, "url") is not None:
            raise NothingToUndo("the queue existed before: CreateQueue changed nothing", "read")
        url = answer.get("QueueUrl")
        if not isinstance(url, str):
            raise Irreversible("the CreateQueue answer names no QueueUrl")
        out = awsjson.call(facts, "DeleteQueue", {"QueueUrl": url})
        check = awsjson.read_back(facts, "GetQueueUrl", {"QueueName": body.get("QueueName")})
        check["gone"] = True
        out["readback"] = check
        out["repeatable"] = True
        return out
    ident = {"QueueUrl": _queue_url(facts)}
    doc = awsjson.answer(facts, "attributes")
    if doc is None:
        raise NothingToUndo("the queue did not exist before the call", "read")
    attrs = {k: v for k, v in (doc.get("Attributes") or {}).items() if k not in _COMPUTED}
    if act == "DeleteQueue":
        held = sum(
            int((doc.get("Attributes") or {}).get(k) or 0)
            for k in (
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",
            )
        )
        if held:
            raise Irreversible(
                f"the deleted queue held about {held} messages, which cannot be put back"
            )
        tags = (awsjson.answer(facts, "tags") or {}).get("Tags") or {}
        name = ident["QueueUrl"].rstrip("/").rsplit("/", 1)[-1]
        create: dict[str, Any] = {"QueueName": name, "Attributes": attrs}
        if tags:
            create["tags"] = tags
        out = awsjson.call(facts, "CreateQueue", create)
        out["readback"] = _attributes_check(facts, ident, attrs)
        out["repeatable"] = True
        return out
    if act == "SetQueueAttributes":
        keys = [str(k) for k in (body.get("Attributes") or {})]
        if not keys:
            raise NothingToUndo("the call sets no attribute", "request")
        old = {k: attrs.get(k, "") for k in keys}
        out = awsjson.call(facts, "SetQueueAttributes", {**ident, "Attributes": old})
        out["readback"] = _attributes_check(facts, ident, {k: attrs.get(k) for k in keys})
        out["repeatable"] = True
        out["target"] = "sqs " + ident["QueueUrl"]
        return out
    # TagQueue, UntagQueue
    before = {
        str(k): str(v) for k, v in ((awsjson.answer(facts, "tags") or {}).get("Tags") or {}).items()
    }
    keys = (
        list((body.get("Tags") or {}).keys())
        if act == "TagQueue"
        else list(body.get("TagKeys") or [])
    )
    calls = _tag_undo(facts, before, [str(k) for k in keys], "TagQueue", "UntagQueue", ident)
    if not calls:
        raise NothingToUndo("the call names no tag", "request")
    out = _with_then(calls)
    check = awsjson.read_back(facts, "ListQueueTags", ident)
    check["expect"] = [readback.expect(["Tags", str(k)], before.get(str(k))) for k in keys]
    out["readback"] = check
    out["repeatable"] = True
    return out


READS: dict[str, Callable[[Facts], list[PreRead]]] = {
    "secretsmanager.secret": secret_reads,
    "ssm.parameters": parameter_reads,
    "sqs.queue": queue_reads,
}

BUILDERS: dict[str, Callable[[Facts], dict[str, Any]]] = {
    "secretsmanager.secret": undo_secret,
    "ssm.parameters": undo_parameters,
    "sqs.queue": undo_queue,
}

DESCRIPTIONS = {
    "secretsmanager.secret": "the secret's previous version made current again, a created "
    "secret deleted, a deleted one restored, tags and description put back",
    "ssm.parameters": "each parameter's old value and type put back, or a created one deleted",
    "sqs.queue": "a created queue deleted, a deleted empty one recreated with its attributes "
    "and tags, attributes and tags set back",
}

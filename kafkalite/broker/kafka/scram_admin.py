"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51) over the Kafka protocol.

What Kafka's own ``kafka-configs.sh --bootstrap-server ... --entity-type users`` and the admin
clients (``AdminClient.alter_user_scram_credentials``) call. An upsertion carries the salt and the
*salted* password (the client derives it), so the password itself never reaches the broker; the
broker derives the stored and server keys and writes Kafka's stored form to ``/config/users/<user>``
through :class:`~kafkalite.broker.entity_configs.EntityConfigs` (which announces the change).

Errors per user, as Kafka: RESOURCE_NOT_FOUND (91) to describe a user without credentials or
delete a credential that does not exist, DUPLICATE_RESOURCE (92) for a user named twice in one
request (twice for one mechanism when altering), UNACCEPTABLE_CREDENTIAL (93) for an iteration
count outside 4096..16384 or an empty salt or salted password, UNSUPPORTED_SASL_MECHANISM (33)
for a mechanism other than SCRAM-SHA-256 (1) and SCRAM-SHA-512 (2).

Concurrency: event-loop only.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from kafkalite.broker.entity_configs import split_entity_path
from kafkalite.broker.kafka.context import ApiHandler, KafkaAnswer, KafkaRequestContext
from kafkalite.errors import KafkaliteError, UnsupportedSaslMechanismError
from kafkalite.security import scram

DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS = 50, 51
RESOURCE_NOT_FOUND, DUPLICATE_RESOURCE, UNACCEPTABLE_CREDENTIAL = 91, 92, 93
#: Kafka's ScramMechanism type codes.
MECHANISM_CODES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
_CODE_OF = {name: code for code, name in MECHANISM_CODES.items()}


def _result(user: str, code: int = 0, message: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"user": user, "error_code": code, "error_message": message, **extra}


async def describe_user_scram_credentials(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    entity_configs = context.services.entity_configs
    entities = entity_configs.entities() if entity_configs is not None else {}
    if request.users:
        names = [str(item.name) for item in request.users]
    else:  # every user with a credential
        names = [user for path, configs in entities.items()
                 for user, client_id in (split_entity_path(path),)
                 if user is not None and client_id is None and any(key in configs for key in _CODE_OF)]
    counts = Counter(names)
    results = []
    for name in dict.fromkeys(names):
        if counts[name] > 1:
            results.append(_result(name, DUPLICATE_RESOURCE, "Cannot describe SCRAM credentials for the same "
                                   f"user twice in a single request: {name}", credential_infos=[]))
            continue
        configs = entity_configs.user_configs(name) if entity_configs is not None else {}
        infos = []
        for mechanism, code in _CODE_OF.items():
            text = configs.get(mechanism)
            if text is None:
                continue
            try:
                infos.append({"mechanism": code, "iterations": scram.ScramCredential.from_text(text).iterations})
            except KafkaliteError:
                continue
        if not infos:
            results.append(_result(name, RESOURCE_NOT_FOUND,
                                   f"Attempt to describe a user credential that does not exist: {name}",
                                   credential_infos=[]))
        else:
            results.append(_result(name, credential_infos=infos))
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "results": results}


async def alter_user_scram_credentials(context: KafkaRequestContext, request: Any) -> KafkaAnswer:
    entity_configs = context.services.entity_configs
    changes: dict[str, tuple[dict[str, str], list[str]]] = {}
    failed: dict[str, tuple[int, str]] = {}
    seen = Counter((str(item.name), int(item.mechanism)) for item in [*request.deletions, *request.upsertions])
    for item in request.deletions:
        name, code = str(item.name), int(item.mechanism)
        changes.setdefault(name, ({}, []))
        if code not in MECHANISM_CODES:
            failed.setdefault(name, (UnsupportedSaslMechanismError.errno, f"Unknown SCRAM mechanism {code}"))
        else:
            changes[name][1].append(MECHANISM_CODES[code])
    for item in request.upsertions:
        name, code = str(item.name), int(item.mechanism)
        changes.setdefault(name, ({}, []))
        if code not in MECHANISM_CODES:
            failed.setdefault(name, (UnsupportedSaslMechanismError.errno, f"Unknown SCRAM mechanism {code}"))
            continue
        iterations = int(item.iterations)
        if not scram.MIN_ITERATIONS <= iterations <= scram.MAX_ITERATIONS or not item.salt or \
                not item.salted_password:
            failed.setdefault(name, (UNACCEPTABLE_CREDENTIAL, f"Iterations {iterations} must be between "
                                     f"{scram.MIN_ITERATIONS} and {scram.MAX_ITERATIONS}, with a salt and salted "
                                     "password"))
            continue
        mechanism = MECHANISM_CODES[code]
        credential = scram.credential_from_salted(mechanism, bytes(item.salted_password), bytes(item.salt), iterations)
        changes[name][0][mechanism] = credential.to_text()
    for (name, code), count in seen.items():
        if count > 1:
            failed[name] = (DUPLICATE_RESOURCE, f"A user credential cannot be altered twice in the same request: "
                                                f"{name} mechanism {code}")
    results = []
    for name, (upserts, deletions) in changes.items():
        if name in failed:
            results.append(_result(name, *failed[name]))
            continue
        if entity_configs is None:
            results.append(_result(name, UNACCEPTABLE_CREDENTIAL, "this broker keeps no credentials"))
            continue
        existing = entity_configs.user_configs(name)
        missing = [mechanism for mechanism in deletions if mechanism not in existing]
        if missing:
            results.append(_result(name, RESOURCE_NOT_FOUND, f"Attempt to delete a user credential that does not "
                                                             f"exist: {name} {', '.join(missing)}"))
            continue
        try:
            await entity_configs.alter(name, None, upserts, deletions)
        except KafkaliteError as exc:
            results.append(_result(name, getattr(exc, "errno", UNACCEPTABLE_CREDENTIAL), str(exc)))
            continue
        results.append(_result(name))
    return {"throttle_time": 0, "results": results}


HANDLERS: tuple[ApiHandler, ...] = (
    ApiHandler(DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0, describe_user_scram_credentials),
    ApiHandler(ALTER_USER_SCRAM_CREDENTIALS, 0, 0, alter_user_scram_credentials),
)

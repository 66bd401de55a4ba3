"""``kafkalite-configs.sh``: describe and change topic and broker configs, like Kafka's
``kafka-configs.sh``.

Entities: ``--entity-type topics|brokers`` with ``--entity-name NAME`` (a broker's name is
its id) or, for brokers, ``--entity-default`` (the cluster-wide default every broker falls back
to); the shorthands ``--topic T``, ``--broker N`` and ``--broker-defaults`` do the same.

``--describe`` prints Kafka's layout::

    Dynamic configs for topic orders are:
      retention.ms=86400000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=86400000}

with ``--all`` every config, not only the dynamic ones ("All configs for ..."). Where Kafka
lists the whole synonym chain (per-broker, cluster default, static, default), kafkalite lists
the source of the effective value only (for a topic config at its default, under the broker
setting's name, e.g. ``DEFAULT_CONFIG:log.retention.ms=...``). Without an entity name every topic (or every broker)
is described, one block each.

``--alter --add-config k1=v1,k2=[a,b] --delete-config k3,k4`` sets and removes dynamic configs
in one request and prints "Completed updating config for topic T." (or "... for broker N.", or
"Completed updating default config for brokers in the cluster."). As in Kafka, deleting a
config that has no dynamic value is an error ("Invalid config(s): ...").

Users and clients (Kafka's ``/config/users``, ``/config/clients`` entities): ``--entity-type
users --entity-name alice`` (or ``--entity-default``), ``--entity-type clients ...``, or both in
one command for a user's client. ``--add-config 'SCRAM-SHA-256=[iterations=8192,password=P]'``
(and SCRAM-SHA-512; iterations default to 4096) computes Kafka's stored credential here, so the
password never leaves the tool; quota keys (``producer_byte_rate``, ...) are stored as given.
``--describe`` prints "Quota configs for user-principal 'alice' are ..." and "SCRAM credential
configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192", never salts or keys.

Exit codes: 0 done, 1 the operation failed (unknown topic or broker, invalid config, ...), 2
bad arguments.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafkalite.client import ConfigResource, ConfigResourceType, KafkaAdminClient
from kafkalite.config import BROKER_TO_TOPIC_NAMES
from kafkalite.errors import KafkaliteError
from kafkalite.tools.common import (
    ToolArgumentParser,
    UsageError,
    bootstrap_from_zookeeper,
    command_config_options,
    run_cli,
)

_ENTITY_TYPES = {"topics": "topics", "topic": "topics", "brokers": "brokers", "broker": "brokers"}
_UNSUPPORTED_ENTITY_TYPES = ("ips", "broker-loggers")
_DYNAMIC_TOPIC_SOURCES = {"DYNAMIC_TOPIC_CONFIG"}
_DYNAMIC_BROKER_SOURCES = {"DYNAMIC_BROKER_CONFIG", "DYNAMIC_DEFAULT_BROKER_CONFIG"}
_DEFAULT_BROKER_SOURCE = "DYNAMIC_DEFAULT_BROKER_CONFIG"
_BROKER_NAME_OF_TOPIC_CONFIG = {topic_name: broker_name for broker_name, topic_name in BROKER_TO_TOPIC_NAMES.items()}


def build_parser() -> ToolArgumentParser:
    """The command line, with kafka-configs.sh's flag names."""
    parser = ToolArgumentParser(prog="kafkalite-configs.sh",
                                description="Add, delete or describe configs of topics, brokers, users and clients.")
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT",
                        help="REQUIRED (or --zookeeper): the broker(s) to connect to, e.g. localhost:9092")
    parser.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]",
                        help="deprecated in Kafka: find the brokers through ZooKeeper instead")
    actions = parser.add_mutually_exclusive_group(required=True)
    actions.add_argument("--describe", action="store_true", help="list configs for the given entity")
    actions.add_argument("--alter", action="store_true", help="alter the configuration of the entity")
    actions.add_argument("--version", action="store_true", help="display kafkalite version")
    parser.add_argument("--entity-type", metavar="TYPE", help="topics, brokers, users or clients "
                        "(users and clients may be combined: --entity-type users --entity-name U "
                        "--entity-type clients --entity-name C)")
    parser.add_argument("--entity-name", metavar="NAME", help="the topic name, broker id, user or client id")
    parser.add_argument("--entity-default", action="store_true",
                        help="the default entity (brokers, users or clients)")
    parser.add_argument("--topic", metavar="TOPIC", help="shorthand for --entity-type topics --entity-name TOPIC")
    parser.add_argument("--broker", metavar="ID", help="shorthand for --entity-type brokers --entity-name ID")
    parser.add_argument("--broker-defaults", action="store_true",
                        help="shorthand for --entity-type brokers --entity-default")
    parser.add_argument("--add-config", action="append", metavar="K=V[,K2=V2]",
                        help="configs to set: 'k1=v1,k2=[v1,v2,v2],k3=v3' (square brackets group a list value)")
    parser.add_argument("--add-config-file", metavar="FILE", help="a properties file of configs to set")
    parser.add_argument("--delete-config", action="append", metavar="K[,K2]", help="configs to remove: 'k1,k2'")
    parser.add_argument("--all", action="store_true", help="with --describe: every config, not only dynamic ones")
    parser.add_argument("--force", action="store_true", help="accepted for compatibility; not used")
    parser.add_argument("--command-config", help="client properties file: security.protocol, ssl.*, sasl.*")
    return parser


@dataclass(frozen=True)
class Entity:
    """What the command is about: a topic, a broker, all topics or brokers, or the broker default."""

    entity_type: str  # "topics" or "brokers"
    name: str | None  # None: every entity of the type
    default: bool = False  # the brokers' cluster-wide default

    @property
    def resource_type(self) -> ConfigResourceType:
        """The admin client's resource type."""
        return ConfigResourceType.TOPIC if self.entity_type == "topics" else ConfigResourceType.BROKER

    @property
    def singular(self) -> str:
        """``topic`` or ``broker``."""
        return self.entity_type[:-1]


def split_config_list(text: str) -> list[str]:
    """Split at commas outside square brackets: ``a=1,b=[x,y]`` → ``["a=1", "b=[x,y]"]``."""
    items: list[str] = []
    depth = 0
    current: list[str] = []
    for character in text:
        if character == "[":
            depth += 1
        elif character == "]":
            depth = max(0, depth - 1)
        if character == "," and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(character)
    items.append("".join(current))
    return [item.strip() for item in items if item.strip()]


def parse_add_config(values: list[str] | None) -> dict[str, str]:
    """``--add-config`` values → name → value (``[a,b]`` becomes ``a,b``)."""
    configs: dict[str, str] = {}
    for text in values or []:
        for item in split_config_list(text):
            name, separator, value = item.partition("=")
            if not separator or not name.strip():
                raise UsageError(f"--add-config expects key=value pairs separated by commas, got {item!r}")
            value = value.strip()
            if value.startswith("[") and value.endswith("]"):
                value = value[1:-1]
            configs[name.strip()] = value
    return configs


def parse_add_config_file(path: str | None) -> dict[str, str]:
    """``--add-config-file``: ``name=value`` lines; ``#`` and ``!`` start comments."""
    if path is None:
        return {}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read --add-config-file {path}: {exc.strerror or exc}") from None
    configs: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        name, separator, value = stripped.partition("=")
        if not separator or not name.strip():
            raise UsageError(f"--add-config-file {path} line {number}: expected name=value, got {stripped!r}")
        configs[name.strip()] = value.strip()
    return configs


def parse_delete_config(values: list[str] | None) -> list[str]:
    """``--delete-config k1,k2`` (repeatable) → names, in order, without duplicates."""
    names: list[str] = []
    for text in values or []:
        for name in (part.strip() for part in text.split(",")):
            if name and name not in names:
                names.append(name)
    return names


def resolve_entity(arguments: Any) -> Entity:
    """The entity from ``--entity-*`` or the shorthands; usage errors for contradictions."""
    shorthands = [flag for flag, given in (("--topic", arguments.topic is not None),
                                           ("--broker", arguments.broker is not None),
                                           ("--broker-defaults", arguments.broker_defaults)) if given]
    explicit = arguments.entity_type is not None or arguments.entity_name is not None or arguments.entity_default
    if len(shorthands) > 1 or (shorthands and explicit):
        raise UsageError(f"give the entity once: {', '.join(shorthands + (['--entity-type'] if explicit else []))}")
    if arguments.topic is not None:
        return _named("topics", arguments.topic)
    if arguments.broker is not None:
        return _named("brokers", arguments.broker)
    if arguments.broker_defaults:
        return Entity("brokers", None, default=True)
    if arguments.entity_type is None:
        raise UsageError("--entity-type is required (or --topic, --broker, --broker-defaults)")
    requested = arguments.entity_type.strip().lower()
    if requested in _UNSUPPORTED_ENTITY_TYPES:
        raise UsageError(f"kafkalite keeps configs for topics, brokers, users and clients only, not {requested}")
    entity_type = _ENTITY_TYPES.get(requested)
    if entity_type is None:
        raise UsageError(f"--entity-type must be topics, brokers, users or clients, got {arguments.entity_type!r}")
    if arguments.entity_default:
        if entity_type != "brokers":
            raise UsageError("--entity-default applies to --entity-type brokers only")
        if arguments.entity_name is not None:
            raise UsageError("--entity-name and --entity-default cannot be used together")
        return Entity("brokers", None, default=True)
    return _named(entity_type, arguments.entity_name)


def _named(entity_type: str, name: str | None) -> Entity:
    if name is None:
        return Entity(entity_type, None)
    if not name.strip():
        raise UsageError(f"the entity name of {entity_type} must not be empty")
    if entity_type == "brokers":
        try:
            int(name)
        except ValueError:
            raise UsageError(f"The entity name for brokers must be a valid integer broker id, "
                             f"but it is: {name}") from None
    return Entity(entity_type, name.strip())


def main(argv: list[str] | None = None) -> int:
    """Run the tool; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    found = user_client_entity(argv)
    if found is not None:
        return user_client_main(found)
    arguments = build_parser().parse_args(argv)
    if arguments.version:
        from kafkalite import __version__

        print(__version__)
        return 0
    entity = resolve_entity(arguments)
    additions: dict[str, str] = {}
    deletions: list[str] = []
    if arguments.alter:
        if entity.name is None and not entity.default:
            raise UsageError("--alter needs --entity-name (or --entity-default for brokers)")
        additions = {**parse_add_config_file(arguments.add_config_file), **parse_add_config(arguments.add_config)}
        deletions = parse_delete_config(arguments.delete_config)
        if not additions and not deletions:
            raise UsageError("At least one of --add-config, --add-config-file, or --delete-config must be "
                             "specified with --alter")
        both = sorted(set(additions) & set(deletions))
        if both:
            raise UsageError(f"config(s) both added and deleted: {', '.join(both)}")
    elif arguments.add_config or arguments.add_config_file or arguments.delete_config:
        raise UsageError("--add-config, --add-config-file and --delete-config need --alter")
    if not arguments.bootstrap_server:
        if not arguments.zookeeper:
            raise UsageError("--bootstrap-server is required")
        arguments.bootstrap_server = bootstrap_from_zookeeper(arguments.zookeeper)
    admin = KafkaAdminClient(bootstrap_servers=arguments.bootstrap_server, client_id="kafkalite-configs",
                             **command_config_options(arguments.command_config))
    try:
        if arguments.describe:
            return _describe(admin, entity, arguments.all)
        return _alter(admin, entity, additions, deletions)
    finally:
        admin.close()


def _fail(message: str) -> int:
    print(f"Error: {message}", file=sys.stderr)
    return 1


def _describe_one(admin: KafkaAdminClient, entity_type: ConfigResourceType, name: str) -> dict[str, Any]:
    """name → {"value", "config_source", ...} of one topic or broker; raises its error."""
    answer = admin.describe_configs([ConfigResource(entity_type, name)])
    return dict(next(iter(next(iter(answer.values())).values())))


def _print_block(header: str, configs: dict[str, Any], sources: set[str] | None) -> None:
    print(header)
    for name in sorted(configs):
        entry = configs[name]
        source = str(entry.get("config_source") or "")
        if sources is not None and source not in sources:
            continue
        value = entry.get("value")
        shown = "null" if value is None else value
        # A topic config at its default comes from the broker-level setting, named as in Kafka.
        synonym = _BROKER_NAME_OF_TOPIC_CONFIG.get(name, name) if source == "DEFAULT_CONFIG" else name
        print(f"  {name}={shown} sensitive=false synonyms={{{source}:{synonym}={shown}}}")


def _describe(admin: KafkaAdminClient, entity: Entity, show_all: bool) -> int:
    label = "All" if show_all else "Dynamic"
    if entity.entity_type == "topics":
        existing = admin.list_topics()
        if entity.name is not None and entity.name not in existing:
            return _fail(f"The topic '{entity.name}' does not exist.")
        names = [entity.name] if entity.name is not None else existing
        for name in names:
            configs = _describe_one(admin, ConfigResourceType.TOPIC, name)
            _print_block(f"{label} configs for topic {name} are:", configs,
                         None if show_all else _DYNAMIC_TOPIC_SOURCES)
        return 0
    brokers = sorted(broker["broker_id"] for broker in admin.describe_cluster()["brokers"])
    if entity.default:
        # Every broker reports the cluster default for the configs it does not override itself:
        # the union over the brokers shows every default unless all brokers override it.
        defaults: dict[str, Any] = {}
        for broker_id in brokers:
            for name, entry in _describe_one(admin, ConfigResourceType.BROKER, str(broker_id)).items():
                if entry.get("config_source") == _DEFAULT_BROKER_SOURCE:
                    defaults.setdefault(name, entry)
        _print_block("Default configs for brokers in the cluster are:", defaults, None)
        return 0
    if entity.name is not None and int(entity.name) not in brokers:
        return _fail(f"broker {entity.name} is not in the cluster (live brokers: "
                     f"{', '.join(str(broker) for broker in brokers) or 'none'})")
    targets = [int(entity.name)] if entity.name is not None else brokers
    for broker_id in targets:
        configs = _describe_one(admin, ConfigResourceType.BROKER, str(broker_id))
        _print_block(f"{label} configs for broker {broker_id} are:", configs,
                     None if show_all else _DYNAMIC_BROKER_SOURCES)
    return 0


def _alter(admin: KafkaAdminClient, entity: Entity, additions: dict[str, str], deletions: list[str]) -> int:
    name = "" if entity.default else str(entity.name)
    if entity.entity_type == "topics" and name not in admin.list_topics():
        return _fail(f"The topic '{name}' does not exist.")
    if deletions and not entity.default:
        # The cluster default is not checked: a broker's answer hides the defaults it overrides.
        configs = _describe_one(admin, entity.resource_type, name)
        dynamic = _DYNAMIC_TOPIC_SOURCES if entity.entity_type == "topics" else {"DYNAMIC_BROKER_CONFIG"}
        # A topic's answer names every topic config; a broker's may leave dynamic-only configs
        # out, so for brokers only a config listed with another source is known to be unset.
        invalid = [key for key in deletions
                   if (key in configs or entity.entity_type == "topics")
                   and configs.get(key, {}).get("config_source") not in dynamic]
        if invalid:
            return _fail(f"Invalid config(s): {','.join(invalid)}")
    changes: dict[str, Any] = dict(additions)
    changes.update(dict.fromkeys(deletions))
    try:
        admin.incremental_alter_configs([ConfigResource(entity.resource_type, name, changes)])
    except KafkaliteError as exc:
        return _fail(str(exc))
    if entity.default:
        print("Completed updating default config for brokers in the cluster.")
    else:
        print(f"Completed updating config for {entity.singular} {name}.")
    return 0


# -- users and clients (SCRAM credentials, quotas) -------------------------------------------

_USER_CLIENT_TYPES = {"users": "users", "user": "users", "clients": "clients", "client": "clients"}


@dataclass(frozen=True)
class UserClientEntity:
    """``--entity-type users|clients`` (once each, in any order) with a name or ``--entity-default``
    each (``<default>``); a name may be missing for --describe (every entity of the type)."""

    user: str | None  # raw name, "<default>", or None when users are not part of the entity
    client_id: str | None
    has_user: bool
    has_client: bool


def user_client_entity(argv: list[str]) -> tuple[UserClientEntity, list[str]] | None:
    """Take the ``--entity-type users|clients`` / ``--entity-name`` / ``--entity-default`` pairs out
    of ``argv`` (they may repeat, as in Kafka); None when the command is not about users or clients."""
    pairs: list[list[str | None]] = []
    rest: list[str] = []
    index = 0
    while index < len(argv):
        token = argv[index]
        flag, equals, inline = token.partition("=")
        if flag in ("--entity-type", "--entity-name"):
            value = inline if equals else (argv[index + 1] if index + 1 < len(argv) else None)
            index += 1 if equals else 2
            if value is None:
                raise UsageError(f"{flag} needs a value")
            if flag == "--entity-type":
                pairs.append([value.strip().lower(), None])
            elif not pairs or pairs[-1][1] is not None:
                pairs.append([None, value])
            else:
                pairs[-1][1] = value
            continue
        if token == "--entity-default":
            if not pairs or pairs[-1][1] is not None:
                pairs.append([None, "<default>"])
            else:
                pairs[-1][1] = "<default>"
            index += 1
            continue
        rest.append(token)
        index += 1
    types = [pair[0] for pair in pairs]
    if not any(kind in _USER_CLIENT_TYPES for kind in types):
        return None
    user: str | None = None
    client_id: str | None = None
    has_user = has_client = False
    for kind, name in pairs:
        entity_type = _USER_CLIENT_TYPES.get(kind or "")
        if entity_type is None:
            raise UsageError(f"--entity-type {kind} cannot be combined with users or clients")
        if name is not None and not name.strip():
            raise UsageError(f"the entity name of {entity_type} must not be empty")
        if entity_type == "users":
            if has_user:
                raise UsageError("--entity-type users given twice")
            has_user, user = True, name
        else:
            if has_client:
                raise UsageError("--entity-type clients given twice")
            has_client, client_id = True, name
    return UserClientEntity(user, client_id, has_user, has_client), rest


def _label(user: str | None, client_id: str | None, has_user: bool, has_client: bool) -> str:
    parts = []
    if has_user:
        parts.append("the default user-principal" if user == "<default>" else f"user-principal '{user}'")
    if has_client:
        parts.append("the default client-id" if client_id == "<default>" else f"client-id '{client_id}'")
    return ", ".join(parts)


def scram_credential_config(mechanism: str, text: str) -> str:
    """``iterations=8192,password=secret`` (the bracket content of ``SCRAM-SHA-256=[...]``) →
    Kafka's stored credential text; the password is used here and nowhere else."""
    from kafkalite.security.scram import DEFAULT_ITERATIONS, new_credential

    fields: dict[str, str] = {}
    for item in text.split(","):
        key, separator, value = item.partition("=")
        if not separator:
            raise UsageError(f"{mechanism} expects [iterations=N,password=P], got an item without '='")
        fields[key.strip()] = value
    unknown = sorted(set(fields) - {"iterations", "password"})
    if unknown or "password" not in fields:
        raise UsageError(f"{mechanism} expects [iterations=N,password=P] (password required)")
    try:
        iterations = int(fields.get("iterations", DEFAULT_ITERATIONS))
    except ValueError:
        raise UsageError(f"{mechanism} iterations must be an integer") from None
    try:
        return new_credential(mechanism, fields["password"], iterations).to_text()
    except KafkaliteError as exc:
        raise UsageError(str(exc)) from None


def user_client_main(found: tuple[UserClientEntity, list[str]]) -> int:
    """``kafkalite-configs.sh`` for users and clients."""
    entity, rest = found
    arguments = build_parser().parse_args(rest)
    if arguments.version:
        from kafkalite import __version__

        print(__version__)
        return 0
    if arguments.topic is not None or arguments.broker is not None or arguments.broker_defaults:
        raise UsageError("--topic/--broker/--broker-defaults cannot be combined with users or clients")
    if not arguments.bootstrap_server:
        if not arguments.zookeeper:
            raise UsageError("--bootstrap-server is required")
        arguments.bootstrap_server = bootstrap_from_zookeeper(arguments.zookeeper)
    additions: dict[str, str] = {}
    deletions: list[str] = []
    if arguments.alter:
        if (entity.has_user and entity.user is None) or (entity.has_client and entity.client_id is None):
            raise UsageError("--alter needs --entity-name or --entity-default for each --entity-type")
        additions = {**parse_add_config_file(arguments.add_config_file), **parse_add_config(arguments.add_config)}
        deletions = parse_delete_config(arguments.delete_config)
        if not additions and not deletions:
            raise UsageError("At least one of --add-config, --add-config-file, or --delete-config must be "
                             "specified with --alter")
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            if mechanism in additions:
                additions[mechanism] = scram_credential_config(mechanism, additions[mechanism])
    elif arguments.add_config or arguments.add_config_file or arguments.delete_config:
        raise UsageError("--add-config, --add-config-file and --delete-config need --alter")
    admin = KafkaAdminClient(bootstrap_servers=arguments.bootstrap_server, client_id="kafkalite-configs",
                             **command_config_options(arguments.command_config))
    try:
        if arguments.alter:
            try:
                admin.alter_entity_configs(entity.user, entity.client_id, additions, deletions)
            except KafkaliteError as exc:
                return _fail(str(exc))
            names = []
            if entity.has_user:
                names.append("default user" if entity.user == "<default>" else f"user {entity.user}")
            if entity.has_client:
                names.append("default client" if entity.client_id == "<default>" else f"client {entity.client_id}")
            print(f"Completed updating config for {', '.join(names)}.")
            return 0
        for item in admin.describe_entity_configs():
            user, client_id = item.get("user"), item.get("client_id")
            if (user is not None) != entity.has_user or (client_id is not None) != entity.has_client:
                continue
            if (entity.user is not None and user != entity.user) or \
                    (entity.client_id is not None and client_id != entity.client_id):
                continue
            configs: dict[str, str] = item.get("configs", {})
            label = _label(user, client_id, entity.has_user, entity.has_client)
            quotas = {key: value for key, value in configs.items() if not key.startswith("SCRAM-")}
            credentials = {key: value for key, value in configs.items() if key.startswith("SCRAM-")}
            if quotas:
                print(f"Quota configs for {label} are {', '.join(f'{k}={v}' for k, v in sorted(quotas.items()))}")
            if credentials:
                print(f"SCRAM credential configs for {label} are "
                      f"{', '.join(f'{k}={v}' for k, v in sorted(credentials.items()))}")
        return 0
    finally:
        admin.close()


if __name__ == "__main__":
    sys.exit(run_cli(main))

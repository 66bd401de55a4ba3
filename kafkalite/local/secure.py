"""The secure variant of the one-command local cluster (``kafkalite-cluster.sh start --secure``).

``python -m kafkalite.local.secure prepare --data-dir DIR --zookeeper HOST:PORT/CHROOT``
makes, once per data directory, what a cluster with Kafka's usual production security needs,
and leaves what exists alone (a restart keeps its CA, certificates and password):

- ``DIR/security/ca.cert.pem``: a CA; ``DIR/security/broker.pem``: a broker certificate it
  signs (``localhost`` and ``127.0.0.1``), key and chain in one PEM file, as
  ``ssl.keystore.location`` reads it;
- the super user ``admin`` with a random password and its SCRAM-SHA-512 credential, written to
  ZooKeeper under ``/config/users/admin`` in Kafka's stored form before any broker starts (the
  brokers authenticate to each other as ``admin``);
- ``DIR/admin.properties`` (mode 0600): ``security.protocol=SASL_SSL``,
  ``sasl.mechanism=SCRAM-SHA-512``, ``sasl.username``, ``sasl.password`` and
  ``ssl.ca.location``: the keys confluent-kafka / librdkafka (``kcat -F``) and every
  kafkalite tool (``--command-config``) accept as they are;
- ``DIR/security/server.properties``: the broker settings that turn it on (SASL_SSL listener,
  SCRAM-SHA-512, PEM key and trust stores, the ACL authorizer with ``admin`` as super user,
  no plaintext schema-registry listener), which the script adds to each broker's properties
  with the broker's own address.

``python -m kafkalite.local.secure get --data-dir DIR URL`` is what the script's readiness
probes use: GET ``URL`` over TLS with the cluster's CA and the admin's credentials (HTTP Basic),
print the body and exit 0 on a 2xx answer; :func:`open_url` is the same for Python callers.

Concurrency: a command-line step run before the brokers start; not thread-safe.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import secrets
import ssl
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from kafkalite.coord.znodes import config_entity_path
from kafkalite.security.certs import make_ca, make_server_certificate
from kafkalite.security.scram import new_credential

ADMIN_USER = "admin"
MECHANISM = "SCRAM-SHA-512"
#: The SCRAM iterations of the admin's credential (Kafka's kafka-configs.sh default).
ITERATIONS = 8192


@dataclass(frozen=True)
class SecureFiles:
    """Where a secure cluster's files live under its data directory."""

    data_dir: Path

    @property
    def directory(self) -> Path:
        return self.data_dir / "security"

    @property
    def ca_certificate(self) -> Path:
        return self.directory / "ca.cert.pem"

    @property
    def broker_keystore(self) -> Path:
        return self.directory / "broker.pem"

    @property
    def password_file(self) -> Path:
        return self.directory / "admin.password"

    @property
    def broker_settings(self) -> Path:
        return self.directory / "server.properties"

    @property
    def admin_properties(self) -> Path:
        return self.data_dir / "admin.properties"


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)


def admin_password(files: SecureFiles) -> str:
    """The admin's password, made on first use."""
    if files.password_file.exists():
        return files.password_file.read_text(encoding="utf-8").strip()
    password = secrets.token_urlsafe(18)
    _write_private(files.password_file, password + "\n")
    return password


def make_certificates(files: SecureFiles) -> None:
    """The CA and the broker certificate, unless both exist."""
    if files.ca_certificate.exists() and files.broker_keystore.exists():
        return
    files.directory.mkdir(parents=True, exist_ok=True)
    authority = make_ca(files.directory)
    make_server_certificate(authority, files.directory, name="broker")


def broker_settings(files: SecureFiles, password: str) -> dict[str, str]:
    """The settings a broker of the secure cluster adds to its properties (the listener's
    address is the script's)."""
    jaas = (f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{ADMIN_USER}" '
            f'password="{password}";')
    return {
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL",
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.enabled.mechanisms": MECHANISM,
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config": jaas,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(files.broker_keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(files.ca_certificate),
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": f"User:{ADMIN_USER}",
    }


def client_properties(files: SecureFiles, password: str) -> dict[str, str]:
    """``admin.properties``: what confluent-kafka, kcat and the kafkalite tools read."""
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": MECHANISM,
        "sasl.username": ADMIN_USER,
        "sasl.password": password,
        "ssl.ca.location": str(files.ca_certificate),
    }


def _properties_text(header: str, settings: dict[str, str]) -> str:
    return f"# {header}\n" + "".join(f"{key}={value}\n" for key, value in settings.items())


def write_admin_credential(zookeeper: str, password: str) -> None:
    """The admin's SCRAM credential in ``/config/users/admin`` under the cluster's chroot
    (Kafka's layout and stored form), other mechanisms' credentials of the user kept."""
    credential = new_credential(MECHANISM, password, ITERATIONS)
    hosts, _, chroot = zookeeper.partition("/")
    path = ("/" + chroot.strip("/") if chroot.strip("/") else "") + config_entity_path("users", ADMIN_USER)
    client = KazooClient(hosts=hosts, timeout=10)
    client.start(timeout=30)
    try:
        current: dict[str, object] = {}
        client.ensure_path(path)
        data, _ = client.get(path)
        if data:
            loaded = json.loads(data)
            if isinstance(loaded, dict) and isinstance(loaded.get("config"), dict):
                current = dict(loaded["config"])
        current[MECHANISM] = credential.to_text()
        client.set(path, json.dumps({"version": 1, "config": current}, separators=(",", ":")).encode())
    finally:
        client.stop()
        client.close()


def prepare(data_dir: Path, zookeeper: str) -> SecureFiles:
    """Everything the secure cluster needs (see the module docstring)."""
    files = SecureFiles(data_dir)
    make_certificates(files)
    password = admin_password(files)
    write_admin_credential(zookeeper, password)
    _write_private(files.broker_settings, _properties_text(
        "kafkalite-cluster.sh --secure: added to every broker's server.properties", broker_settings(files, password)))
    _write_private(files.admin_properties, _properties_text(
        "The admin super user of the secure local cluster: --command-config for the kafkalite tools, "
        "-F for kcat, the settings of a confluent-kafka client", client_properties(files, password)))
    return files


def open_url(data_dir: Path, url: str, timeout: float) -> bytes:
    """GET ``url`` over TLS with the cluster's CA and the admin's credentials; the body of a 2xx
    answer (OSError otherwise, as urllib raises it)."""
    files = SecureFiles(data_dir)
    context = ssl.create_default_context(cafile=str(files.ca_certificate))
    token = base64.b64encode(f"{ADMIN_USER}:{admin_password(files)}".encode()).decode()
    request = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
    with opener.open(request, timeout=timeout) as response:
        return bytes(response.read())


def get_json(secure_dir: str, port: int, path: str, timeout: float) -> Any:
    """GET ``path`` from the broker on ``127.0.0.1:port`` and parse its JSON: over plain HTTP
    when ``secure_dir`` is empty, else over TLS as the admin of the secure cluster in that data
    directory (OSError or ValueError when it does not answer 2xx JSON)."""
    if not secure_dir:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(f"http://127.0.0.1:{port}{path}", timeout=timeout) as response:
            return json.load(response)
    return json.loads(open_url(Path(secure_dir), f"https://127.0.0.1:{port}{path}", timeout))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafkalite.local.secure",
                                     description="Prepare or probe the secure local cluster.")
    commands = parser.add_subparsers(dest="command", required=True)
    prepare_parser = commands.add_parser("prepare", help="make certificates, the admin user and the properties")
    prepare_parser.add_argument("--data-dir", required=True, type=Path)
    prepare_parser.add_argument("--zookeeper", required=True, help="HOST:PORT/CHROOT of the cluster's ZooKeeper")
    get_parser = commands.add_parser("get", help="GET a URL over TLS as the admin; exit 0 on 2xx")
    get_parser.add_argument("--data-dir", required=True, type=Path)
    get_parser.add_argument("--timeout", type=float, default=3.0)
    get_parser.add_argument("url")
    arguments = parser.parse_args(argv)
    if arguments.command == "prepare":
        prepare(arguments.data_dir, arguments.zookeeper)
        return 0
    try:
        sys.stdout.write(open_url(arguments.data_dir, arguments.url, arguments.timeout).decode("utf-8", "replace"))
    except (OSError, ValueError):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

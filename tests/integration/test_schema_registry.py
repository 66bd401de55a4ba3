"""The schema registry built into the brokers, against confluent-kafka's own registry client and serdes.

Three real brokers; broker 1 also serves the registry at the root of its own port
(``schema.registry.listeners``). confluent-kafka's ``SchemaRegistryClient``, ``AvroSerializer``
and ``AvroDeserializer`` run unchanged against ``http://<broker>/registry``; records produced by
confluent-kafka's Producer over the Kafka listener are read by kafkalite's consumer with
kafkalite's deserializer and the other way round. Bad input gets Confluent's error bodies with a
4xx status and no broker logs an ERROR line (``running_cluster`` checks).
"""

from __future__ import annotations

import json
import random
import subprocess
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer as ConfluentConsumer, Producer as ConfluentProducer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import (
    AvroDeserializer as ConfluentAvroDeserializer,
    AvroSerializer as ConfluentAvroSerializer,
)
from confluent_kafka.schema_registry.error import SchemaRegistryError as ConfluentRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from kafkalite import KafkaConsumer, KafkaProducer, TopicPartition
from kafkalite.registry.client import RegistryClient
from kafkalite.registry.errors import SubjectNotFoundError
from kafkalite.registry.serdes import (
    AvroDeserializer,
    AvroSerializer,
    JSONSchemaDeserializer,
    JSONSchemaSerializer,
    SerializationError,
    unframe,
)
from tests.support.cluster import ROOT, BrokerCluster, free_port, running_cluster
from tests.support.docs import marked_block

pytestmark = pytest.mark.integration

ORDER_V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"}, {"name": "item", "type": "string"}, {"name": "amount", "type": "double"}]}
ORDER_V2 = {**ORDER_V1, "fields": [*ORDER_V1["fields"], {"name": "note", "type": "string", "default": ""}]}
ORDER_BAD = {**ORDER_V1, "fields": [*ORDER_V1["fields"], {"name": "priority", "type": "int"}]}
REGISTRY_PORT = free_port()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper: Any) -> Iterator[BrokerCluster]:
    with running_cluster(tmp_path_factory, zookeeper, "schema-registry", per_broker_properties={
            1: {"schema.registry.listeners": f"http://127.0.0.1:{REGISTRY_PORT}"}}) as brokers:
        yield brokers


def registry_url(cluster: BrokerCluster, broker_id: int) -> str:
    return f"http://{cluster.brokers[broker_id].address}/registry"


def call(url: str, method: str, path: str, body: Any = None, raw: bytes | None = None,
         content_type: str = "application/vnd.schemaregistry.v1+json") -> tuple[int, Any]:
    """(status, parsed body) of one request, whatever the status."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    request = urllib.request.Request(url + path, data=data, method=method, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.headers["Content-Type"].startswith("application/vnd.schemaregistry.v1+json")
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        with exc:
            assert exc.headers["Content-Type"].startswith("application/vnd.schemaregistry.v1+json")
            return exc.code, json.loads(exc.read())


def subject() -> str:
    return f"orders-{uuid.uuid4().hex[:8]}-value"


def test_confluent_client_registers_evolves_and_refuses(cluster: BrokerCluster) -> None:
    with SchemaRegistryClient({"url": registry_url(cluster, 2)}) as client, \
            SchemaRegistryClient({"url": registry_url(cluster, 3)}) as fresh:
        check_confluent_client(client, fresh)


def check_confluent_client(client: SchemaRegistryClient, fresh: SchemaRegistryClient) -> None:
    name = subject()
    first = client.register_schema(name, Schema(json.dumps(ORDER_V1), "AVRO"))
    assert client.register_schema(name, Schema(json.dumps(ORDER_V1), "AVRO")) == first
    fetched = client.get_schema(first)
    assert json.loads(fetched.schema_str) == ORDER_V1 and fetched.schema_type == "AVRO"
    assert client.test_compatibility(name, Schema(json.dumps(ORDER_V2), "AVRO")) is True
    assert client.test_compatibility(name, Schema(json.dumps(ORDER_BAD), "AVRO")) is False
    second = client.register_schema(name, Schema(json.dumps(ORDER_V2), "AVRO"))
    assert second > first
    latest = client.get_latest_version(name)
    assert (latest.version, latest.schema_id) == (2, second)
    assert client.get_versions(name) == [1, 2]
    assert name in client.get_subjects()
    with pytest.raises(ConfluentRegistryError) as refused:
        client.register_schema(name, Schema(json.dumps(ORDER_BAD), "AVRO"))
    assert (refused.value.http_status_code, refused.value.error_code) == (409, 409)
    client.set_compatibility(name, "NONE")
    assert client.get_compatibility(name) == "NONE"
    assert client.register_schema(name, Schema(json.dumps(ORDER_BAD), "AVRO")) > second
    for call_, code in ((lambda: fresh.get_latest_version("no-such-subject"), 40401),
                        (lambda: fresh.get_version(name, 99), 40402),
                        (lambda: fresh.get_schema(987654), 40403),
                        (lambda: fresh.register_schema(subject(), Schema('{"type": "record"}', "AVRO")), 42201),
                        (lambda: fresh.lookup_schema(name, Schema('"string"', "AVRO")), 40403)):
        with pytest.raises(ConfluentRegistryError) as caught:
            call_()
        assert caught.value.error_code == code, caught.value


def test_same_schema_same_id_across_subjects_and_brokers(cluster: BrokerCluster) -> None:
    text = json.dumps({"type": "record", "name": "Shared", "fields": [{"name": "x", "type": "int"}]})
    spaced = json.dumps(json.loads(text), indent=4)
    one = RegistryClient(registry_url(cluster, 1)).register(subject(), text)
    two = RegistryClient(registry_url(cluster, 3)).register(subject(), spaced)
    assert one == two
    # a write through one broker is visible on the others at once (read-your-write)
    name = subject()
    schema_id = RegistryClient(registry_url(cluster, 3)).register(name, json.dumps(ORDER_V1))
    for broker_id in cluster.brokers:
        status, body = call(registry_url(cluster, broker_id), "GET", f"/subjects/{name}/versions/latest")
        assert status == 200 and body["id"] == schema_id and body["version"] == 1


def test_confluent_producer_to_kafkalite_consumer_and_back(cluster: BrokerCluster) -> None:
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    cluster.wait_in_sync(topic)
    url = registry_url(cluster, 2)
    with SchemaRegistryClient({"url": url}) as confluent_registry:
        check_produce_and_consume(cluster, topic, url, confluent_registry)


def check_produce_and_consume(cluster: BrokerCluster, topic: str, url: str,
                              confluent_registry: SchemaRegistryClient) -> None:
    serializer = ConfluentAvroSerializer(confluent_registry, json.dumps(ORDER_V1))
    producer = ConfluentProducer({"bootstrap.servers": cluster.bootstrap})
    sent = [{"id": number, "item": f"widget-{number}", "amount": number * 1.5} for number in range(5)]
    for value in sent:
        producer.produce(topic, value=serializer(value, SerializationContext(topic, MessageField.VALUE)))
    assert producer.flush(30) == 0

    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, consumer_timeout_ms=10_000,
                             value_deserializer=AvroDeserializer(url))
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        received = [record.value for record in consumer][:5]
    finally:
        consumer.close()
    assert received == sent

    # kafkalite's producer and serializer (schema v2, registered by it), confluent-kafka's consumer and deserializer
    kafkalite_producer = KafkaProducer(bootstrap_servers=cluster.bootstrap,
                                       value_serializer=AvroSerializer(url, json.dumps(ORDER_V2), topic=topic))
    more = [{"id": 10 + number, "item": "gadget", "amount": 2.0, "note": f"n{number}"} for number in range(3)]
    try:
        for value in more:
            kafkalite_producer.send(topic, value)
        kafkalite_producer.flush()
    finally:
        kafkalite_producer.close()
    assert RegistryClient(url).versions(f"{topic}-value") == [1, 2]
    deserializer = ConfluentAvroDeserializer(confluent_registry)
    reader = ConfluentConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                                "auto.offset.reset": "earliest", "enable.auto.commit": False})
    decoded: list[Any] = []
    try:
        reader.subscribe([topic])
        while len(decoded) < 8:
            message = reader.poll(30)
            assert message is not None, f"only {len(decoded)} records arrived"
            assert message.error() is None, message.error()
            decoded.append(deserializer(message.value(), SerializationContext(topic, MessageField.VALUE)))
    finally:
        reader.close()
    assert decoded[5:] == more
    assert [value["id"] for value in decoded[:5]] == list(range(5))


def test_json_schema_serdes_round_trip(cluster: BrokerCluster) -> None:
    url = registry_url(cluster, 1)
    schema = json.dumps({"type": "object", "title": "Click", "properties": {"page": {"type": "string"}},
                         "required": ["page"]})
    serializer = JSONSchemaSerializer(url, schema, topic="clicks", subject_name_strategy="RecordNameStrategy")
    framed = serializer({"page": "/home"})
    assert framed[0] == 0 and RegistryClient(url).versions("Click") == [1]
    assert JSONSchemaDeserializer(RegistryClient(registry_url(cluster, 3)))(framed) == {"page": "/home"}
    with pytest.raises(SerializationError, match="does not match the JSON schema"):
        serializer({"page": 3})
    # auto-registration off: an unregistered schema is refused; use_latest_version takes the subject's latest
    avro_topic = f"latest-{uuid.uuid4().hex[:6]}"
    with pytest.raises(SubjectNotFoundError):
        AvroSerializer(url, json.dumps(ORDER_V1), topic=avro_topic, auto_register=False)(
            {"id": 1, "item": "x", "amount": 1.0})
    RegistryClient(url).register(f"{avro_topic}-value", json.dumps({**ORDER_V2, "namespace": "latest"}))
    latest = AvroSerializer(url, None, topic=avro_topic, use_latest_version=True)
    framed_latest = latest({"id": 1, "item": "x", "amount": 1.0})
    assert AvroDeserializer(url)(framed_latest) == {"id": 1, "item": "x", "amount": 1.0, "note": ""}
    assert unframe(framed_latest)[0] == RegistryClient(url).version(f"{avro_topic}-value").schema_id


def test_confluent_error_bodies_for_bad_input(cluster: BrokerCluster) -> None:
    url = registry_url(cluster, 3)
    name = subject()
    RegistryClient(url).register(name, json.dumps(ORDER_V1))
    cases: list[tuple[str, str, Any, bytes | None, int, int]] = [
        ("POST", f"/subjects/{name}/versions", None, b"{not json", 400, 400),
        ("POST", f"/subjects/{name}/versions", None, b"[1, 2]", 422, 422),
        ("POST", f"/subjects/{name}/versions", {"schema": 12}, None, 422, 422),
        ("POST", f"/subjects/{name}/versions", {"schema": "{\"type\": \"nope\"}"}, None, 422, 42201),
        ("POST", f"/subjects/{name}/versions", {"schema": "{}", "schemaType": "XML"}, None, 422, 42201),
        ("POST", "/subjects/bad%01name/versions", {"schema": "\"string\""}, None, 422, 42208),
        ("GET", f"/subjects/{name}/versions/zero", None, None, 422, 42202),
        ("GET", f"/subjects/{name}/versions/0", None, None, 422, 42202),
        ("GET", f"/subjects/{name}/versions/7", None, None, 404, 40402),
        ("GET", "/subjects/missing-subject/versions", None, None, 404, 40401),
        ("GET", "/schemas/ids/99999", None, None, 404, 40403),
        ("GET", "/schemas/ids/minus", None, None, 422, 422),
        ("PUT", "/config", {"compatibility": "SIDEWAYS"}, None, 422, 42203),
        ("PUT", "/mode", {"mode": "SLEEPY"}, None, 422, 42204),
        ("GET", "/no/such/path", None, None, 404, 404),
        ("PATCH", "/subjects", None, None, 405, 405),
        ("DELETE", f"/subjects/{name}/versions/1?permanent=true", None, None, 404, 40407),
        ("GET", f"/config/{name}", None, None, 404, 40408),
    ]
    for method, path, body, raw, status, code in cases:
        answer = call(url, method, path, body, raw)
        assert answer[0] == status and answer[1]["error_code"] == code, (method, path, answer)
        assert isinstance(answer[1]["message"], str) and answer[1]["message"]


def test_deletes_config_mode_and_the_own_port(cluster: BrokerCluster) -> None:
    root = f"http://127.0.0.1:{REGISTRY_PORT}"
    name = subject()
    own_v1, own_v2 = ({**schema, "namespace": "deletes"} for schema in (ORDER_V1, ORDER_V2))
    assert call(root, "POST", f"/subjects/{name}/versions", {"schema": json.dumps(own_v1)})[0] == 200
    v2 = call(root, "POST", f"/subjects/{name}/versions", {"schema": json.dumps(own_v2)})[1]["id"]
    other = registry_url(cluster, 2)
    assert call(other, "GET", "/schemas/types")[1] == ["JSON", "AVRO"]
    assert call(other, "GET", f"/schemas/ids/{v2}/versions")[1] == [{"subject": name, "version": 2}]
    assert call(other, "POST", f"/subjects/{name}", {"schema": json.dumps(own_v2)})[1]["version"] == 2
    assert call(other, "DELETE", f"/subjects/{name}/versions/2") == (200, 2)
    assert call(root, "GET", f"/subjects/{name}/versions") == (200, [1])
    assert call(root, "GET", f"/subjects/{name}/versions?deleted=true") == (200, [1, 2])
    assert call(root, "GET", f"/schemas/ids/{v2}")[0] == 200  # soft-deleted schemas stay readable by id
    assert call(other, "DELETE", f"/subjects/{name}/versions/2?permanent=true") == (200, 2)
    assert call(root, "GET", f"/subjects/{name}/versions?deleted=true") == (200, [1])
    assert call(other, "DELETE", f"/subjects/{name}") == (200, [1])
    assert call(root, "GET", "/subjects")[1].count(name) == 0
    assert call(root, "DELETE", f"/subjects/{name}?permanent=true") == (200, [1])
    assert call(root, "GET", f"/subjects/{name}/versions?deleted=true")[1]["error_code"] == 40401
    # a new registration after the permanent delete never reuses the deleted ids
    fresh = call(other, "POST", f"/subjects/{subject()}/versions", {"schema": json.dumps(
        {"type": "record", "name": "Fresh", "fields": [{"name": "z", "type": "int"}]})})
    assert fresh[0] == 200 and fresh[1]["id"] > v2, fresh
    assert call(root, "PUT", f"/config/{name}", {"compatibility": "full"}) == (200, {"compatibility": "FULL"})
    assert call(other, "GET", f"/config/{name}") == (200, {"compatibilityLevel": "FULL"})
    assert call(other, "DELETE", f"/config/{name}") == (200, {"compatibilityLevel": "FULL"})
    assert call(other, "GET", f"/config/{name}?defaultToGlobal=true") == (200, {"compatibilityLevel": "BACKWARD"})
    assert call(other, "GET", "/mode") == (200, {"mode": "READWRITE"})
    assert call(other, "PUT", f"/mode/{name}", {"mode": "READONLY"}) == (200, {"mode": "READONLY"})
    refused = call(root, "POST", f"/subjects/{name}/versions", {"schema": json.dumps(own_v1)})
    assert refused[0] == 422 and refused[1]["error_code"] == 42205
    assert call(root, "DELETE", f"/mode/{name}") == (200, {"mode": "READONLY"})


def test_concurrent_registrations_on_every_broker_get_distinct_ids(cluster: BrokerCluster) -> None:
    results: dict[str, int] = {}
    errors: list[BaseException] = []

    def register(broker_id: int, number: int) -> None:
        name = f"race-{uuid.uuid4().hex[:6]}-{number}"
        schema = json.dumps({"type": "record", "name": f"Race{broker_id}x{number}",
                             "fields": [{"name": "f", "type": "int"}]})
        try:
            results[name] = RegistryClient(registry_url(cluster, broker_id)).register(name, schema)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=register, args=(broker_id, number))
               for number in range(4) for broker_id in cluster.brokers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert len(results) == 12 and len(set(results.values())) == 12


def run_script(script: str, *arguments: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(ROOT / "scripts" / script), *arguments], input=stdin, capture_output=True,
                            text=True, timeout=90)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def test_avro_console_producer_and_consumer(cluster: BrokerCluster) -> None:
    topic = f"avro-console-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    bootstrap = cluster.bootstrap.split(",")[0]
    url = registry_url(cluster, 2)
    schema = json.dumps({"type": "record", "name": "Reading", "fields": [
        {"name": "sensor", "type": "string"}, {"name": "value", "type": ["null", "double"], "default": None}]})
    lines = '{"sensor": "a", "value": {"double": 1.5}}\n{"sensor": "b", "value": null}\n'
    produced = run_script("kafkalite-avro-console-producer.sh", "--bootstrap-server", bootstrap, "--topic", topic,
                          "--property", f"schema.registry.url={url}", "--property", f"value.schema={schema}",
                          stdin=lines)
    assert produced.returncode == 0, produced.stderr
    schema_id = RegistryClient(url).version(f"{topic}-value").schema_id
    consumed = run_script("kafkalite-avro-console-consumer.sh", "--bootstrap-server", bootstrap, "--topic", topic,
                          "--from-beginning", "--max-messages", "2", "--property", f"schema.registry.url={url}",
                          "--property", "print.schema.ids=true")
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == [f'{{"sensor": "a", "value": 1.5}}\t{schema_id}',
                                            f'{{"sensor": "b", "value": null}}\t{schema_id}']
    # the records are Confluent-framed Avro: confluent-kafka's deserializer reads them too
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, consumer_timeout_ms=10_000,
                             value_deserializer=AvroDeserializer(url))
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        assert [record.value for record in consumer][:2] == [{"sensor": "a", "value": 1.5},
                                                             {"sensor": "b", "value": None}]
    finally:
        consumer.close()

    bad_line = run_script("kafkalite-avro-console-producer.sh", "--bootstrap-server", bootstrap, "--topic", topic,
                          "--property", f"schema.registry.url={url}", "--property", f"value.schema={schema}",
                          stdin='{"sensor": 12}\n')
    assert bad_line.returncode == 1 and "does not match the Avro schema" in bad_line.stderr
    unknown = run_script("kafkalite-avro-console-consumer.sh", "--bootstrap-server", bootstrap, "--topic", topic,
                         "--property", f"schema.registry.url={url}", "--property", "print.schema.idz=true")
    assert unknown.returncode == 2 and "print.schema.idz" in unknown.stderr
    no_url = run_script("kafkalite-avro-console-producer.sh", "--bootstrap-server", bootstrap, "--topic", topic,
                        "--property", f"value.schema={schema}", stdin="")
    assert no_url.returncode == 2 and "schema.registry.url" in no_url.stderr


def test_readme_block_runs_as_written(cluster: BrokerCluster, capsys: pytest.CaptureFixture[str]) -> None:
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    code = marked_block("schema-registry", "python").replace('"orders"', f'"{topic}"').replace(
        "http://localhost:9092/registry", registry_url(cluster, 3)).replace("localhost:9092", cluster.bootstrap)
    exec(compile(code, "docs:schema-registry", "exec"), {})
    assert capsys.readouterr().out.splitlines()[-1] == "[{'id': 1, 'item': 'book'}]"


def test_random_bad_requests_get_4xx_error_bodies(cluster: BrokerCluster) -> None:
    """Seeded random junk at every route: always a Confluent error body, never a 5xx."""
    generator = random.Random(20)
    url = registry_url(cluster, 1)
    name = subject()
    RegistryClient(url).register(name, json.dumps(ORDER_V1))
    paths = [f"/subjects/{name}/versions", f"/subjects/{name}", "/compatibility/subjects/x/versions/latest",
             "/config", f"/config/{name}", "/mode", f"/subjects/{name}/versions/1", "/schemas/ids/1"]
    bodies: list[bytes] = [b"", b"null", b"\xff\xfe", b"[" * 5000, b'{"schema": null}', b'{"schema": "' + b"{" * 300
                           + b'"}', b'{"schema": "\\"int\\"", "references": [{"name": 1}]}',
                           b'{"schema": "\\"int\\"", "schemaType": 5}', b'{"compatibility": ["FULL"]}',
                           b'{"mode": null}', b'{"schema": "\\"int\\"", "id": "seven"}',
                           b'{"schema": "{\\"type\\": \\"enum\\", \\"name\\": \\"E\\", \\"symbols\\": 3}"}']
    bodies += [bytes(generator.randrange(256) for _ in range(generator.randrange(1, 64))) for _ in range(20)]
    for body in bodies:
        for method, path in (("POST", generator.choice(paths)), ("PUT", generator.choice(paths))):
            status, answer = call(url, method, path, raw=body)
            assert 400 <= status < 500 or status == 200, (method, path, body[:40], status, answer)
            assert status == 200 or isinstance(answer.get("error_code"), int), answer
    for path in ("/subjects/a%2Fb/versions", "/subjects/%ZZ/versions", "/schemas/ids/0", "/schemas/ids/99999999999",
                 "/subjects/" + "x" * 5000 + "/versions", f"/subjects/{name}/versions/latest/schema/extra"):
        status, answer = call(url, "GET", path)
        assert 400 <= status < 500 and isinstance(answer["error_code"], int), (path, status, answer)

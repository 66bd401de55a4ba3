"""``kafkalite-console-producer.sh``: read lines from standard input and produce them, like
Kafka's console producer (``--property parse.key=true``, ``key.separator``, ``--producer-property``,
``--compression-codec``, ``--request-required-acks``, ``--sync``). Every line is one record;
the tool waits for every send to be acknowledged before it exits and exits 1 if any failed."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TextIO

from kafkalite.client import KafkaProducer
from kafkalite.config import load_properties
from kafkalite.errors import KafkaliteError
from kafkalite.tools.common import (
    ToolArgumentParser,
    UsageError,
    parse_bool_property,
    parse_key_values,
    pop_security_options,
    run_cli,
)

_PRODUCER_OPTIONS = {
    "acks": "acks", "compression.type": "compression_type", "linger.ms": "linger_ms", "batch.size": "batch_size",
    "retries": "retries", "request.timeout.ms": "request_timeout_ms", "delivery.timeout.ms": "delivery_timeout_ms",
    "max.request.size": "max_request_size", "buffer.memory": "buffer_memory", "client.id": "client_id",
    "enable.idempotence": "enable_idempotence", "max.block.ms": "max_block_ms", "retry.backoff.ms": "retry_backoff_ms",
    "max.in.flight.requests.per.connection": "max_in_flight_requests_per_connection",
    "bootstrap.servers": "bootstrap_servers",
}


def build_parser() -> ToolArgumentParser:
    parser = ToolArgumentParser(prog="kafkalite-console-producer.sh",
                                description="Read data from standard input and publish it to a topic.")
    parser.add_argument("--bootstrap-server", "--broker-list", dest="bootstrap_server", required=True,
                        metavar="HOST:PORT",
                        help="REQUIRED: the broker(s) to connect to (--broker-list is the old name)")
    parser.add_argument("--topic", required=True, help="REQUIRED: the topic to produce to")
    parser.add_argument("--property", action="append", metavar="NAME=VALUE",
                        help="reader properties: parse.key=true, key.separator=<sep> (default tab), "
                             "ignore.error=true, file=<path> (read lines from a file instead of stdin)")
    parser.add_argument("--producer-property", action="append", metavar="NAME=VALUE",
                        help="a producer config (Kafka's names: acks, linger.ms, compression.type, ...)")
    parser.add_argument("--producer.config", dest="producer_config", help="producer config properties file")
    parser.add_argument("--compression-codec", nargs="?", const="gzip",
                        choices=["none", "gzip", "lz4", "zstd"], help="compression codec (gzip when no value)")
    parser.add_argument("--request-required-acks", default=None, help="acks: 0, 1 or all (default all)")
    parser.add_argument("--sync", action="store_true", help="wait for each record's acknowledgement")
    parser.add_argument("--batch-size", type=int, help="records per batch when sending asynchronously")
    parser.add_argument("--timeout", type=int, help="linger time in ms before a partial batch is sent")
    return parser


def _producer_options(arguments: Any) -> dict[str, Any]:
    raw: dict[str, str] = {}
    if arguments.producer_config:
        raw.update(load_properties(arguments.producer_config))
    raw.update(parse_key_values(arguments.producer_property, "--producer-property"))
    options: dict[str, Any] = pop_security_options(raw)
    for name, value in raw.items():
        option = _PRODUCER_OPTIONS.get(name)
        if option is None:
            raise UsageError(f"unknown producer property {name!r}; known: {', '.join(sorted(_PRODUCER_OPTIONS))}")
        options[option] = value
    for option in ("linger_ms", "batch_size", "retries", "request_timeout_ms", "delivery_timeout_ms",
                   "max_request_size", "buffer_memory", "max_block_ms", "retry_backoff_ms",
                   "max_in_flight_requests_per_connection"):
        if option in options:
            try:
                options[option] = int(options[option])
            except ValueError:
                raise UsageError(f"producer property for {option} must be an integer") from None
    if "enable_idempotence" in options:
        options["enable_idempotence"] = str(options["enable_idempotence"]).lower() == "true"
    if arguments.compression_codec:
        options["compression_type"] = None if arguments.compression_codec == "none" else arguments.compression_codec
    if arguments.request_required_acks is not None:
        options["acks"] = arguments.request_required_acks
    if "acks" in options:
        acks = str(options["acks"]).strip().lower()
        if acks not in ("0", "1", "-1", "all"):
            raise UsageError(f"acks must be 0, 1, -1 or all, got {options['acks']!r}")
        options["acks"] = acks if acks == "all" else int(acks)
    if arguments.batch_size is not None:
        options["batch_size"] = arguments.batch_size
    if arguments.timeout is not None:
        options["linger_ms"] = arguments.timeout
    options["bootstrap_servers"] = arguments.bootstrap_server
    options.setdefault("client_id", "console-producer")
    return options


#: Turns a line's text into the value handed to the producer (the plain tool: its UTF-8 bytes).
LineCodec = Callable[[str], Any]
#: Given the ``--property`` values and the producer's options (which it may extend, e.g. with
#: serializers), the codecs of a line's key and value (the Avro console producer passes one).
CodecFactory = Callable[[dict[str, str], dict[str, Any]], tuple[LineCodec, LineCodec]]


def _utf8(text: str) -> bytes:
    return text.encode("utf-8")


def main(argv: list[str] | None = None, stdin: TextIO | None = None, *, prog: str | None = None,
         description: str | None = None, codecs: CodecFactory | None = None) -> int:
    parser = build_parser()
    if prog is not None:
        parser.prog = prog
    if description is not None:
        parser.description = description
    arguments = parser.parse_args(argv)
    properties = parse_key_values(arguments.property, "--property")
    parse_key = parse_bool_property(properties, "parse.key")
    ignore_error = parse_bool_property(properties, "ignore.error")
    separator = properties.get("key.separator", "\t")
    if parse_key and not separator:
        raise UsageError("key.separator must not be empty")
    options = _producer_options(arguments)
    encode_key, encode_value = codecs(properties, options) if codecs is not None else (_utf8, _utf8)
    source: TextIO
    if "file" in properties:
        try:
            # Closed in the finally below, with the producer.
            source = open(properties["file"], encoding="utf-8")  # noqa: SIM115
        except OSError as exc:
            raise UsageError(f"cannot read {properties['file']}: {exc.strerror}") from None
    else:
        source = stdin or sys.stdin
    interactive = source.isatty()
    producer = KafkaProducer(**options)
    failures: list[str] = []

    def on_error(error: BaseException) -> None:
        failures.append(str(error))
        print(f"Error when sending message to topic {arguments.topic}: {error}", file=sys.stderr)

    try:
        number = 0
        while True:
            if interactive:
                print(">", end="", flush=True)
            line = source.readline()
            if not line:
                break
            number += 1
            text = line[:-1] if line.endswith("\n") else line
            key: bytes | None = None
            if parse_key:
                if separator not in text:
                    message = f"No key separator found on line number {number}: '{text}'"
                    if ignore_error:
                        key, value = None, encode_value(text)
                    else:
                        raise UsageError(message)
                else:
                    key_text, _, value_text = text.partition(separator)
                    key, value = encode_key(key_text), encode_value(value_text)
            else:
                value = encode_value(text)
            future = producer.send(arguments.topic, value=value, key=key)
            future.add_errback(on_error)
            if arguments.sync:
                try:
                    future.get(timeout=60)
                except KafkaliteError:
                    pass  # reported by the errback
        producer.flush()
    finally:
        producer.close()
        if source is not sys.stdin and source is not stdin:
            source.close()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(run_cli(main))

"""The broker's log formats: ``log.format=json`` lines, the option's validation and the
``--log-level`` flag."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from kafkalite.broker import __main__ as broker_main
from kafkalite.broker.log_format import JsonLogFormatter
from kafkalite.config import BrokerConfig
from kafkalite.errors import ConfigError


def record(message: str, *args: object, exc_info: object = None) -> logging.LogRecord:
    return logging.LogRecord("kafkalite.broker.replica", logging.WARNING, __file__, 1, message, args,
                             exc_info)  # type: ignore[arg-type]


def test_a_json_line_holds_the_formatted_message_level_logger_and_broker_id() -> None:
    line = json.loads(JsonLogFormatter(broker_id=3).format(record("%s: shrinking ISR from %s", "t-0", [1, 2, 3])))
    assert line["message"] == "t-0: shrinking ISR from [1, 2, 3]"
    assert (line["level"], line["logger"], line["broker_id"]) == ("WARNING", "kafkalite.broker.replica", 3)
    assert line["time"].endswith("Z") and "T" in line["time"]
    assert "exception" not in line


def test_a_json_line_carries_the_traceback_on_one_line() -> None:
    try:
        raise ValueError("bad \"quoted\" value\nsecond line")
    except ValueError:
        text = JsonLogFormatter().format(record("failed", exc_info=sys.exc_info()))
    assert "\n" not in text  # one record, one line, whatever the message or traceback holds
    line = json.loads(text)
    assert "Traceback" in line["exception"] and 'ValueError: bad "quoted" value' in line["exception"]
    assert "broker_id" not in line


def test_log_format_is_text_or_json() -> None:
    assert BrokerConfig().log_format == "text"
    assert BrokerConfig.from_properties({"log.format": "JSON"}).log_format == "json"
    with pytest.raises(ConfigError, match=r"log\.format must be text or json"):
        BrokerConfig.from_properties({"log.format": "xml"})
    assert "log.format" not in BrokerConfig.from_properties({"log.format": "json"}).unknown


def test_an_unknown_log_level_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        broker_main.main(["server.properties", "--log-level", "LOUD"])
    assert exited.value.code == 2
    assert "--log-level" in capsys.readouterr().err

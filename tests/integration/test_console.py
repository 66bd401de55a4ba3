"""The web console (``/console``) driven in a real headless Chromium (Debian's chromium and
chromedriver, through Selenium) against real ZooKeeper and broker processes.

Screenshots of each page go to the test's directory, or to ``KAFKALITE_CONSOLE_SCREENSHOTS``
when set (docs/console/ holds the ones docs/operations.md shows)."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafkalite import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
from tests.support.cluster import BrokerCluster, running_cluster

pytestmark = pytest.mark.integration

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
WAIT_SECONDS = 30


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper: Any) -> Iterator[BrokerCluster]:
    with running_cluster(tmp_path_factory, zookeeper, "console") as brokers:
        yield brokers


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.fail("Debian's chromium and chromium-driver are missing: scripts/install.sh installs them")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="kl-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--window-size=1280,900"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    chosen = os.environ.get("KAFKALITE_CONSOLE_SCREENSHOTS")
    directory = Path(chosen) if chosen else tmp_path_factory.mktemp("console-screenshots")
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def open_page(browser: Any, cluster: BrokerCluster, fragment: str) -> None:
    browser.get(f"http://{cluster.brokers[1].address}/console/#{fragment}")


def text_of(browser: Any, element_id: str) -> str:
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException

    try:
        return str(browser.find_element("id", element_id).text)
    except (NoSuchElementException, StaleElementReferenceException):
        return ""


def wait_for(browser: Any, condition: Any, what: str) -> None:
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        WebDriverWait(browser, WAIT_SECONDS, poll_frequency=0.2).until(lambda _: condition())
    except TimeoutException:
        page = browser.find_element("tag name", "body").text
        raise AssertionError(f"the console never showed {what}; page text:\n{page}\n"
                             f"console log: {browser.get_log('browser')}") from None


def console_errors(browser: Any) -> list[Any]:
    return [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]


def produce(cluster: BrokerCluster, topic: str, values: list[bytes]) -> None:
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    try:
        for value in values:
            producer.send(topic, value=value, partition=0)
        producer.flush(30)
    finally:
        producer.close()


def test_every_page_loads_without_console_errors(browser: Any, cluster: BrokerCluster, screenshots: Path) -> None:
    topic = f"console-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    cluster.wait_in_sync(topic)
    produce(cluster, topic, [b'{"order": %d, "total": 9.5}' % index for index in range(20)])
    pages = {"overview": ("/", "brokers-table"), "topics": ("/topics", "topics-table"),
             "topic": (f"/topics/{topic}", "partitions-table"), "groups": ("/groups", "groups-table"),
             "messages": (f"/messages?topic={topic}&partition=0&offset=0&format=json", "messages-table")}
    for name, (fragment, element) in pages.items():
        open_page(browser, cluster, fragment)
        wait_for(browser, lambda element=element: text_of(browser, element) != "", f"the {name} page")
        if name == "overview":  # a second refresh draws the throughput charts
            wait_for(browser, lambda: len(browser.find_elements("css selector", "#messages-chart polyline")) == 1,
                     "the throughput chart")
            assert text_of(browser, "broker-count") == "3"
            assert "No offline or under-replicated partitions" in text_of(browser, "alerts")
        browser.save_screenshot(str(screenshots / f"{name}.png"))
        assert console_errors(browser) == [], f"the {name} page logged errors"
    assert (screenshots / "overview.png").stat().st_size > 10_000


def test_the_topics_page_shows_a_topic_the_test_created_with_its_offsets(browser: Any, cluster: BrokerCluster) -> None:
    topic = f"console-orders-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, partitions=2, replication_factor=3)
    cluster.wait_in_sync(topic)
    produce(cluster, topic, [b"value-%d" % index for index in range(7)])
    open_page(browser, cluster, "/topics")
    wait_for(browser, lambda: topic in text_of(browser, "topics-table"), f"topic {topic} in the list")
    browser.find_element("link text", topic).click()
    wait_for(browser, lambda: text_of(browser, "partitions-table") != "", "the topic's partitions")
    rows = [[cell.text for cell in row.find_elements("tag name", "td")]
            for row in browser.find_elements("css selector", "#partitions-table tbody tr")]
    assert [row[0] for row in rows] == ["0", "1"]
    assert rows[0][4:7] == ["0", "7", "7"]  # start offset, end offset, messages of partition 0
    assert rows[0][7].endswith(" B") and len(rows[0][3].split(", ")) == 3  # a size; three replicas in sync
    assert "retention.ms" in text_of(browser, "configs-table")


def test_a_produced_message_appears_in_the_message_browser(browser: Any, cluster: BrokerCluster) -> None:
    topic = f"console-browse-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    cluster.wait_in_sync(topic)
    marker = f"hello-from-the-test-{uuid.uuid4().hex[:8]}"
    produce(cluster, topic, [b"first", marker.encode()])
    open_page(browser, cluster, f"/messages?topic={topic}&partition=0&offset=0")
    wait_for(browser, lambda: marker in text_of(browser, "messages-table"), "the produced message")
    open_page(browser, cluster, f"/messages?topic={topic}&partition=0&offset=1&format=hex")
    wait_for(browser, lambda: marker.encode().hex(" ")[:20] in text_of(browser, "messages-table"),
             "the message in hex")
    assert "first" not in text_of(browser, "messages-table")  # from offset 1 on
    assert console_errors(browser) == []


def test_a_groups_lag_drops_after_its_consumer_runs(browser: Any, cluster: BrokerCluster, screenshots: Path) -> None:
    topic, group = f"console-lag-{uuid.uuid4().hex[:6]}", f"console-group-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    cluster.wait_in_sync(topic)
    produce(cluster, topic, [b"record-%d" % index for index in range(30)])
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id=group, enable_auto_commit=False)
    try:
        consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(10, "")})
    finally:
        consumer.close()
    open_page(browser, cluster, "/groups")
    wait_for(browser, lambda: group in text_of(browser, "groups-table"), f"group {group} in the list")
    browser.find_element("link text", group).click()
    wait_for(browser, lambda: text_of(browser, "lag-total") == "20", "a lag of 20")
    consumer = KafkaConsumer(topic, bootstrap_servers=cluster.bootstrap, group_id=group, enable_auto_commit=False)
    try:
        read = 0
        while read < 20:
            read += sum(len(records) for records in consumer.poll(timeout_ms=1000).values())
        consumer.commit()
    finally:
        consumer.close()
    wait_for(browser, lambda: text_of(browser, "lag-total") == "0", "the lag dropping to 0")
    wait_for(browser, lambda: len(browser.find_elements("css selector", "#lag-chart polyline")) == 1, "the lag chart")
    browser.save_screenshot(str(screenshots / "group.png"))
    assert console_errors(browser) == []


def test_the_console_api_names_its_errors(cluster: BrokerCluster) -> None:
    from tests.support.cluster import HttpError, http

    address = cluster.brokers[1].address
    with pytest.raises(HttpError) as missing:
        http(address, "GET", "/console/api/topics/no-such-topic")
    assert missing.value.status == 404 and "UNKNOWN_TOPIC_OR_PARTITION" in str(missing.value)
    with pytest.raises(HttpError) as bad:
        http(address, "GET", "/console/api/messages?topic=x&partition=abc")
    assert bad.value.status == 400 and "partition must be an integer" in str(bad.value)

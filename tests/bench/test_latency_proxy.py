"""The benchmarks' latency proxy (bench/latency_proxy.py) delays each direction by its one-way delay, keeps
order, delivers everything and does not serialise the stream (chunks in flight together arrive together).

The session broker cannot be used: it advertises its own port, so clients would bypass the proxy after
bootstrap. These tests start a broker of their own that advertises the proxy's port."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from bench.latency_proxy import LatencyProxy, proxied_broker
from stylus.config.model import TopicSpec
from stylus.kafka.admin import create_topics
from stylus.kafka.broker import EmbeddedBroker

DELAY_MS = 50.0


@pytest.fixture(scope="module")
def slow_broker() -> Iterator[tuple[EmbeddedBroker, LatencyProxy]]:
    with proxied_broker(DELAY_MS) as pair:
        yield pair


def test_round_trip_through_the_proxy_costs_two_delays_and_delivers_in_order(
        slow_broker: tuple[EmbeddedBroker, LatencyProxy]) -> None:
    broker, proxy = slow_broker
    assert broker.bootstrap.endswith(f":{proxy.port}")  # clients are told to connect to the proxy
    topic = "latency-proxy-order"
    create_topics(broker.bootstrap, {topic: TopicSpec(partitions=1)})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "acks": "all"})
    producer.produce(topic, b"warm-up")
    assert producer.flush(10) == 0  # connections and metadata are in place: the next flush is one round trip
    trips = []
    for _ in range(3):
        started = time.perf_counter()
        producer.produce(topic, b"timed")
        assert producer.flush(10) == 0
        trips.append(time.perf_counter() - started)
    assert 2 * DELAY_MS / 1000 <= min(trips) < 2 * DELAY_MS / 1000 + 0.1, trips
    values = [f"{i:05d}".encode() * 50 for i in range(5000)]  # 1.25 MB: many chunks in flight at once
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "latency-proxy-order",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])  # no group join: only fetches
    got: list[bytes] = []
    deadline = time.monotonic() + 15
    while len(got) < 4 + len(values) and time.monotonic() < deadline:
        got += [m.value() for m in consumer.consume(1000, timeout=0.5) if m.error() is None]
    consumer.close()
    assert got == [b"warm-up", b"timed", b"timed", b"timed", *values]


def test_chunks_in_flight_together_arrive_together_and_in_order() -> None:
    """100 chunks sent 1 ms apart through a 50 ms proxy to an echo server come back in order after about
    2 x 50 ms + 100 ms, not 100 x 100 ms: the delay is latency, not a throughput limit."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        threading.Thread(target=_echo, args=(server,), daemon=True).start()
        with LatencyProxy(server.getsockname()[1], DELAY_MS) as proxy, \
                socket.create_connection(("127.0.0.1", proxy.port)) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            expected = b"".join(f"<{i:03d}>".encode() for i in range(100))
            started = time.perf_counter()
            for i in range(100):
                sock.sendall(f"<{i:03d}>".encode())
                time.sleep(0.001)
            got = b""
            first: float | None = None
            sock.settimeout(5)
            while len(got) < len(expected):
                got += sock.recv(65536)
                first = first or time.perf_counter() - started
            elapsed = time.perf_counter() - started
            assert proxy.cpu_seconds() < 1
    assert got == expected
    assert first is not None and first >= 2 * DELAY_MS / 1000
    assert elapsed < 2 * DELAY_MS / 1000 + 0.1 + 0.15, elapsed  # sending took >= 0.1 s; serialised: 10 s


def _echo(server: socket.socket) -> None:
    conn, _ = server.accept()
    with conn:
        while data := conn.recv(65536):
            conn.sendall(data)

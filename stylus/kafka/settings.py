"""librdkafka settings: our defaults, then the pipeline's `kafka:` block, then the processor's.

Settings pass through by their own dotted names. A `consumer:` or `producer:` sub-mapping
applies to that client only. The same defaults serve the embedded broker (Apache Kafka, one node) and a
real cluster.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from stylus.config.model import Pipeline
from stylus.config.profiles import PROFILE_ENV, ProfileError, active_profile, find_profile, profile_kafka
from stylus.config.secrets import reveal

BOOTSTRAP_ENV = "STYLUS_BOOTSTRAP_SERVERS"

CONSUMER_DEFAULTS: dict[str, Any] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "auto.offset.reset": "earliest",
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 1000,
    "partition.assignment.strategy": "cooperative-sticky",
    # How long the broker may hold a fetch that found no records (librdkafka's default: 500). Kafka answers a
    # waiting fetch as soon as records arrive, so a low value mostly costs idle consumers more fetch requests;
    # the tests and most benchmarks (BENCHMARKS.md) ran with 20, bench/soak.py sets 500
    "fetch.wait.max.ms": 20,
    "fetch.queue.backoff.ms": 10,
    "queued.min.messages": 10000,
    "isolation.level": "read_committed",
    "enable.partition.eof": True,
}

PRODUCER_DEFAULTS: dict[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 5,
    "compression.type": "lz4",
    "partitioner": "murmur2_random",  # the Java client's partitioner: keys co-partition across clients
    "queue.buffering.max.messages": 500_000,
}

#: The output producer of an at-most-once processor sends each record once and never again. A retry (and the
#: idempotent producer, which needs retries) re-sends a request whose answer was lost; the broker drops the copy
#: only while it still holds the producer's sequence numbers, which a broker's unclean restart can lose. And
#: librdkafka sends a batch again, whatever the retry count, when the broker answers that it is not the leader
#: (it takes that answer to mean nothing was written); with `acks: all` a leader that loses its leadership (a
#: controlled shutdown) while it waits to acknowledge answers so for records it has already written. With
#: `acks: 1` it answers as soon as it has written them: what it loses then, at-most-once output may lose.
AT_MOST_ONCE_PRODUCER: dict[str, Any] = {"enable.idempotence": False, "message.send.max.retries": 0, "acks": 1}
#: the `acks` an at-most-once output producer may use: the leader's write alone, or no answer at all
AT_MOST_ONCE_ACKS = ("0", "1")
#: librdkafka's names for the retry count
RETRY_KEYS = ("message.send.max.retries", "retries")

_ROLE_KEYS = ("consumer", "producer", "admin")

#: Settings every client needs to reach a cluster at all, whatever it does there (SASL/SSL, DNS, proxies).
_CONNECTION_PREFIXES = ("security.", "sasl.", "ssl.", "ssl_", "client.dns.", "socket.", "broker.address.",
                        "client.rack", "resolve.", "connections.")


def is_connection_key(name: str) -> bool:
    """Whether every client (the admin included) needs this setting to reach the cluster."""
    return name.startswith(_CONNECTION_PREFIXES)


def bootstrap_from(pipeline: Pipeline | None) -> str | None:
    """`STYLUS_BOOTSTRAP_SERVERS` > the YAML > the `STYLUS_PROFILE`; None means: use the embedded broker."""
    env = os.environ.get(BOOTSTRAP_ENV)
    if env:
        return env
    if pipeline is not None:
        value = pipeline.kafka.get("bootstrap.servers")
        if value:
            return str(value)
    profile = active_profile()  # STYLUS_PROFILE (stylus/config/profiles.py)
    return profile.bootstrap if profile is not None else None


def bootstrap_origin(pipeline: Pipeline | None) -> str:
    """Where `bootstrap_from` found the servers, in the words of an error message (same precedence)."""
    if os.environ.get(BOOTSTRAP_ENV):
        return f"the environment variable {BOOTSTRAP_ENV}"
    if pipeline is not None and pipeline.kafka.get("bootstrap.servers"):
        return f"`kafka.bootstrap.servers` in {pipeline.source}"
    name = os.environ.get(PROFILE_ENV, "").strip()
    try:
        where = str(find_profile(name)) if name else "none"
    except ProfileError:
        where = name
    return f"the profile {where} (selected by {PROFILE_ENV}={name})"


def _common(block: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k not in _ROLE_KEYS}


def _role(block: Mapping[str, Any], role: str) -> dict[str, Any]:
    value = block.get(role) or {}
    return dict(value) if isinstance(value, Mapping) else {}


#: where Kafka clients' own log lines go (`logger` in every client's settings)
CLIENT_LOG = logging.getLogger("stylus.kafka.client")


def client_config(
    role: str,
    bootstrap: str,
    pipeline: Pipeline | None = None,
    processor: str | None = None,
    defaults: Mapping[str, Any] | None = None,
    /,
    **extra: Any,
) -> dict[str, Any]:
    """Settings for a `consumer`, `producer` or `admin` client. `defaults`: a use's own defaults over ours
    (a transactional or a bulk producer), under anything the profile, the YAML or `extra` set. Positional
    only, so no dotted librdkafka name in `extra` can be taken for one of these."""
    config: dict[str, Any] = {}
    if role == "consumer":
        config.update(CONSUMER_DEFAULTS)
    elif role == "producer":
        config.update(PRODUCER_DEFAULTS)
    config.update(defaults or {})
    blocks: list[Mapping[str, Any]] = [profile_kafka()]  # the STYLUS_PROFILE's settings, under the YAML's
    if pipeline is not None:
        blocks.append(pipeline.kafka)
        if processor is not None:
            blocks.append(pipeline.processors[processor].kafka)
    for block in blocks:
        config.update(_common(block))
        config.update(_role(block, role))
    config.update(extra)
    config["bootstrap.servers"] = bootstrap
    if pipeline is not None:
        remember_connection(bootstrap, pipeline)
    config = {k: reveal(v) for k, v in config.items()}  # librdkafka gets the real text of Secret values
    # the client's own log lines go to a Python logger, which the CLI shows with `stylus -v` (one clear error
    # of ours otherwise, not hundreds of retries)
    config.setdefault("logger", CLIENT_LOG)
    if role == "admin":  # the admin client takes only what reaching the cluster needs
        for key in list(config):
            if key not in ("bootstrap.servers", "client.id") and not is_connection_key(key):
                config.pop(key)
    return config


# --------------------------------------------------------------------------- reaching a cluster
_connections: dict[str, dict[str, Any]] = {}


def remember_connection(bootstrap: str, pipeline: Pipeline | None) -> None:
    """Note how to reach `bootstrap` (the profile's and the pipeline's SASL/SSL settings), so the helper
    clients that only get an address (topic readers, offset probes, the admin) connect the same way as the
    processors. Called wherever a pipeline's bootstrap is resolved or a client config is built."""
    settings: dict[str, Any] = {}
    blocks: list[Mapping[str, Any]] = [profile_kafka()]
    if pipeline is not None:
        blocks.append(pipeline.kafka)
    for block in blocks:
        settings.update({k: v for k, v in _common(block).items() if is_connection_key(k)})
    if settings:
        _connections[bootstrap] = settings


def connect(bootstrap: str, **extra: Any) -> dict[str, Any]:
    """A config for a helper client of the cluster at `bootstrap`: its connection settings, then `extra`."""
    config = {k: reveal(v) for k, v in _connections.get(bootstrap, {}).items()}
    config.update(extra)
    config["bootstrap.servers"] = bootstrap
    return config


def forget_connections() -> None:
    """Drop every remembered connection (tests that point several pipelines at one broker)."""
    _connections.clear()

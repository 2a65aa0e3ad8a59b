"""Reach the configured cluster once, quickly, before any command builds its clients.

Without this, an unreachable broker shows up as librdkafka's own connection log, repeated by every
client for as long as their timeouts (tens of seconds), and then as a bare `KafkaException`. One short
metadata request says it in a few seconds, with the address and where it was configured. The client's
log lines go to the Python logger `stylus.kafka.client`, shown with `stylus -v`.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ClusterMetadata

from stylus.config.model import Pipeline
from stylus.errors import ClearError
from stylus.kafka.settings import CLIENT_LOG, client_config

PROBE_TIMEOUT = 5.0  # seconds: long enough for a slow handshake (SASL, TLS), short enough to say so at once
_STEP = 0.25
GRACE = 1.0  # seconds of retrying after a refusal: a broker that is just opening its port gets to answer
#: errors after which waiting longer does not help: every bootstrap server refused, or cannot be resolved
_FATAL = (KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE, KafkaError._AUTHENTICATION,
          KafkaError.SASL_AUTHENTICATION_FAILED)


class BrokerUnreachable(ClearError):
    """No broker of `bootstrap.servers` answered."""


def probe(bootstrap: str, pipeline: Pipeline | None, origin: str, timeout: float = PROBE_TIMEOUT) -> ClusterMetadata:
    """The cluster's metadata, or `BrokerUnreachable` naming the servers and `origin` (where they were set)."""
    errors: list[KafkaError] = []
    config: dict[str, Any] = client_config("admin", bootstrap, pipeline)
    config.update({"error_cb": errors.append, "logger": CLIENT_LOG,
                   "socket.connection.setup.timeout.ms": max(1000, int(timeout * 1000))})
    admin = AdminClient(config)
    started = time.monotonic()
    deadline = started + timeout
    last: str | None = None
    while True:
        remaining = deadline - time.monotonic()
        try:
            return admin.list_topics(timeout=max(0.05, min(_STEP, remaining)))
        except KafkaException as exc:
            last = exc.args[0].str() if exc.args and isinstance(exc.args[0], KafkaError) else str(exc)
        admin.poll(0)  # serves error_cb and the forwarded log lines
        fatal = [e for e in errors if e.code() in _FATAL]
        if (fatal and time.monotonic() - started >= min(GRACE, timeout)) or remaining <= 0:
            raise BrokerUnreachable(_message(bootstrap, origin, errors, last, timeout))


def _message(bootstrap: str, origin: str, errors: list[KafkaError], last: str | None, timeout: float) -> str:
    detail = next((e.str() for e in errors if e.code() != KafkaError._ALL_BROKERS_DOWN), None)
    if detail and "/bootstrap: " in detail:  # librdkafka's "host:port/bootstrap: " prefix repeats the address
        detail = detail.split("/bootstrap: ", 1)[1]
    why = detail or (f"no answer within {timeout:g} s" + (f" ({last})" if last else ""))
    return (f"cannot reach Kafka at {bootstrap} (bootstrap.servers from {origin}): {why}; "
            "start the broker or fix the address there (`stylus -v ...` shows the Kafka client's log)")

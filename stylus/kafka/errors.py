"""Telling a Kafka client's own failure from an error about one call or one record."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

#: A transactional producer was fenced: a newer producer owns its transactional.id (or the id is refused).
FENCED_CODES = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                          KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED})


def client_failed(exc: BaseException) -> bool:
    """The client raised a fatal error (a fenced producer, an idempotence violation): it takes no more calls,
    whatever they carry. Such an error out of `produce` is the producer's failure, never the record's: every
    record produced after it fails the same way (`_FATAL`), and the first to be served says why (`_FENCED`).
    A `SystemError` caused by one is the same failure: confluent-kafka goes on serving delivery reports after
    raising a fatal error from `poll`, and the first Python call in a report callback then fails on it."""
    if isinstance(exc, SystemError) and exc.__cause__ is not None:
        exc = exc.__cause__
    if not isinstance(exc, KafkaException) or not exc.args or not isinstance(exc.args[0], KafkaError):
        return False
    err: KafkaError = exc.args[0]
    return err.fatal() or err.code() == KafkaError._FATAL or err.code() in FENCED_CODES

"""Secrets in librdkafka settings (SASL/SSL passwords, private keys, OAuth secrets): held as `Secret`
values that print as `**********`, and scrubbed from every log record.

`Secret` is a `str` subclass so the settings still travel as plain strings where they must (JSON for
Spark tasks); `str()`, `repr()`, f-strings and `%s` show the mask. librdkafka needs the real text:
`stylus.kafka.settings.client_config` hands it `reveal(value)`. Each secret seen is also remembered,
and a log-record factory replaces it in any message or traceback, whichever logger writes it.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator

MASK = "**********"

#: librdkafka properties that hold secrets, beyond the name patterns below.
SECRET_KEYS = frozenset({
    "sasl.password",
    "sasl.jaas.config",
    "sasl.oauthbearer.config",
    "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.assertion.private.key.pem",
    "sasl.oauthbearer.assertion.private.key.passphrase",
    "ssl.key.password",
    "ssl.key.pem",
    "ssl_key",
    "ssl.keystore.password",
    "ssl.truststore.password",
})
_SECRET_NAME = re.compile(r"password|passwd|secret|passphrase|token|credential|private[._]key|api[._]?key",
                          re.IGNORECASE)


def is_secret_key(name: str) -> bool:
    return name in SECRET_KEYS or bool(_SECRET_NAME.search(name))


class Secret(str):
    """A string that does not show itself. `reveal()` (or `str.__str__`) gives the value."""

    __slots__ = ()

    def __repr__(self) -> str:
        return repr(MASK)

    def __str__(self) -> str:
        return MASK

    def __format__(self, spec: str) -> str:
        return MASK.__format__(spec)

    def reveal(self) -> str:
        return str.__str__(self)


def reveal(value: Any) -> Any:
    """The real value for a client library; other values unchanged."""
    return value.reveal() if isinstance(value, Secret) else value


_known: set[str] = set()
_lock = threading.Lock()
_pattern: re.Pattern[str] | None = None


def remember(value: str) -> None:
    """Scrub `value` from every log record from now on (short values would mask too much: >= 4 chars)."""
    global _pattern
    text = str.__str__(value)
    if len(text) < 4 or text in _known:
        return
    with _lock:
        _known.add(text)
        _pattern = re.compile("|".join(re.escape(s) for s in sorted(_known, key=len, reverse=True)))
    _install_log_scrubbing()


def scrub(text: str) -> str:
    """`text` with every remembered secret replaced by the mask."""
    pattern = _pattern
    return text if pattern is None or not text else pattern.sub(MASK, text)


def hold_secrets(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Wrap the values of secret-named settings (also inside `consumer:`/`producer:`/`admin:`) as `Secret`."""
    out: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, Mapping):
            out[key] = hold_secrets(value)
        elif is_secret_key(str(key)) and isinstance(value, str):
            out[key] = value if isinstance(value, Secret) else Secret(value)
            remember(value)
        else:
            out[key] = value
    return out


_URL_PASSWORD = re.compile(r"^[a-z][a-z0-9+.-]*://[^:/@]*:([^@]+)@", re.IGNORECASE)
_KEYWORD_PASSWORD = re.compile(r"(?:^|\s)password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def hold_dsn(value: str | None) -> str | None:
    """A database connection string is held whole as a `Secret` (it may carry a password), and both the
    string and its password are scrubbed from logs: an error message may quote either."""
    if value is None or isinstance(value, Secret):
        return value
    for match in (_URL_PASSWORD.match(value), _KEYWORD_PASSWORD.search(value)):
        if match:
            remember(match.group(1).strip("'"))
    remember(value)
    return Secret(value)


#: A libpq connection string in the models: held as a secret.
DsnSetting = Annotated[str | None, AfterValidator(hold_dsn)]

#: The type of a `kafka:` block in the models: secrets held, everything else as written.
KafkaSettings = Annotated[dict[str, Any], AfterValidator(hold_secrets)]


def redacted(settings: Mapping[str, Any]) -> dict[str, Any]:
    """A copy for display: secret values replaced by the mask."""
    return {k: redacted(v) if isinstance(v, Mapping) else (MASK if is_secret_key(str(k)) else v)
            for k, v in settings.items()}


_installed = False


def _install_log_scrubbing() -> None:
    """Wrap the log-record factory once: every record's message (and traceback) is scrubbed."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            try:
                message = record.getMessage()
            except Exception:  # a malformed call: leave it to the handler to report
                return record
            clean = scrub(message)
            if clean != message or record.args:
                record.msg, record.args = clean, None
            if record.exc_info and record.exc_info[1] is not None:
                import traceback

                record.exc_text = scrub("".join(traceback.format_exception(*record.exc_info)).rstrip("\n"))
            return record

        logging.setLogRecordFactory(factory)

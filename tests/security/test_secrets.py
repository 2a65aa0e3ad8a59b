"""Secrets in librdkafka settings never appear in command output or logs, yet reach librdkafka intact."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import pytest

from stylus.config import parse_pipeline
from stylus.config.secrets import MASK, Secret, is_secret_key, redacted, reveal
from stylus.kafka.settings import client_config
from tests.conftest import PipelineFactory
from tests.support.cli import run_stylus, stylus_cmd, stylus_env
from tests.support.kafka import produce

ENV_SECRET = "env-Sasl-Pw-7f3a91"
YAML_SECRETS = ["yaml-KeyPw-51c2d8", "yaml-Oauth-0b77e4", "yaml-Consumer-Pw-9e1d22"]


def _doc() -> dict[str, object]:
    return {
        "pipeline": "sec",
        "kafka": {
            "security.protocol": "plaintext",  # the embedded broker has no SASL; the settings still pass through
            "sasl.username": "alice",
            "sasl.password": "${STYLUS_TEST_SASL_PW}",
            "ssl.key.password": YAML_SECRETS[0],
            "consumer": {"sasl.password": YAML_SECRETS[2]},
        },
        "topics": {"in": {"partitions": 1}, "out": {"partitions": 1}},
        "processors": {
            "p": {"class": "tests.apps.counting:Failing", "inputs": ["in"], "outputs": ["out"],
                  "semantics": {"output": "at_least_once"},
                  "kafka": {"producer": {"ssl.keystore.password": YAML_SECRETS[1]}}},
        },
    }


def test_secret_names() -> None:
    for name in ("sasl.password", "ssl.key.password", "ssl.key.pem", "sasl.oauthbearer.client.secret",
                 "sasl.jaas.config", "my.custom.password", "x.secret.y", "ssl.keystore.password"):
        assert is_secret_key(name), name
    for name in ("sasl.username", "bootstrap.servers", "ssl.ca.location", "ssl.certificate.pem", "acks"):
        assert not is_secret_key(name), name


def test_secrets_are_held_masked_but_revealed_to_librdkafka() -> None:
    text = """
pipeline: s
kafka: {sasl.password: "${PW}", sasl.username: bob, consumer: {ssl.key.password: kp-secret-1}}
topics: {a: {}}
processors: {x: {class: "tests.apps.counting:Passthrough", inputs: [a]}}
"""
    pipeline = parse_pipeline(text, environ={"PW": "pw-secret-1"})
    held = pipeline.kafka["sasl.password"]
    assert isinstance(held, Secret) and reveal(held) == "pw-secret-1"
    percent = "%s" % (held,)  # noqa: UP031 - logging-style formatting is what matters
    for shown in (str(held), repr(held), f"{held}", percent, repr(pipeline), str(pipeline.kafka)):
        assert "pw-secret-1" not in shown and "kp-secret-1" not in shown
    assert MASK in repr(pipeline)
    assert redacted(pipeline.kafka) == {"sasl.password": MASK, "sasl.username": "bob",
                                        "consumer": {"ssl.key.password": MASK}}
    config = client_config("consumer", "127.0.0.1:1", pipeline)
    assert type(config["sasl.password"]) is str and config["sasl.password"] == "pw-secret-1"
    assert type(config["ssl.key.password"]) is str and config["ssl.key.password"] == "kp-secret-1"
    # Spark tasks get the pipeline as JSON: it must carry the real value and load back as a Secret
    shipped = type(pipeline).model_validate(pipeline.model_dump(mode="json", by_alias=True))
    assert reveal(shipped.kafka["sasl.password"]) == "pw-secret-1"


def test_secrets_are_scrubbed_from_any_log_record(caplog: pytest.LogCaptureFixture) -> None:
    parse_pipeline("""
pipeline: s
kafka: {sasl.password: logged-secret-42}
topics: {a: {}}
processors: {x: {class: "tests.apps.counting:Passthrough", inputs: [a]}}
""")
    log = logging.getLogger("stylus.test.secrets")
    with caplog.at_level(logging.INFO):
        log.info("connecting with %s", "logged-secret-42")
        log.warning("raw text logged-secret-42 in a message")
        try:
            raise RuntimeError("auth failed for password logged-secret-42")
        except RuntimeError:
            log.exception("boom")
    assert "logged-secret-42" not in caplog.text
    assert caplog.text.count(MASK) >= 3


def test_no_command_prints_or_logs_a_secret(bootstrap: str, pipeline_factory: PipelineFactory,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STYLUS_TEST_SASL_PW", ENV_SECRET)
    path, pipeline = pipeline_factory(_doc())
    secrets = [ENV_SECRET, *YAML_SECRETS]
    env = stylus_env(bootstrap, STYLUS_TEST_SASL_PW=ENV_SECRET, STYLUS_LOG_LEVEL="DEBUG")
    produce(bootstrap, pipeline.processors["p"].inputs[0], [("k", {"id": 1}), ("k", {"id": 2, "fail": True})])
    commands = [
        ["validate", str(path)],
        ["graph", str(path)],
        ["topics", "create", str(path)],
        ["-v", "run", str(path), "--exit-when-idle", "1"],
        ["dlq", str(path), "--processor", "p"],
        ["dlq", str(path), "--processor", "p", "--json"],
        ["lag", str(path)],
        ["deploy", "compose", str(path)],
        ["deploy", "k8s", str(path)],
    ]
    seen = []
    for args in commands:
        result = run_stylus(*args, env=env, timeout=120)
        seen.append((args, result.returncode))
        for secret in secrets:
            assert secret not in result.stdout, (args, "stdout")
            assert secret not in result.stderr, (args, "stderr")
    by_command = {args[0] if args[0] != "-v" else args[1]: code for args, code in seen}
    assert by_command["validate"] == 0 and by_command["run"] == 0 and by_command["dlq"] == 0, seen


def test_an_error_that_quotes_a_secret_is_scrubbed(bootstrap: str, tmp_path: Path) -> None:
    """librdkafka echoes some invalid values back; the CLI's error line must not carry them."""
    doc = tmp_path / "bad.yaml"
    doc.write_text("""
pipeline: s
kafka: {sasl.password: quoted-Secret-77, producer: {compression.type: quoted-Secret-77}}
topics: {a: {}}
processors: {x: {class: "tests.apps.counting:Passthrough", inputs: [a]}}
""")
    result = subprocess.run([*stylus_cmd("run", str(doc), "--exit-when-idle", "1")], env=stylus_env(bootstrap),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "quoted-Secret-77" not in result.stdout + result.stderr
    assert f'Invalid value "{MASK}" for configuration property "compression.codec"' in result.stderr


@pytest.mark.parametrize("dsn, password", [
    ("postgresql://stylus:dsn-Pw-3c9e71@127.0.0.1:1/nodb", "dsn-Pw-3c9e71"),
    ("host=127.0.0.1 port=1 dbname=nodb password='dsn Kw-8a1f04' user=stylus", "dsn Kw-8a1f04"),
])
def test_a_database_password_is_a_secret_too(bootstrap: str, tmp_path: Path, dsn: str, password: str) -> None:
    """The remote monoid state's connection string may carry a password: held, never shown, and the
    real text still reaches libpq (here: a refused connection, with the password nowhere in the error)."""
    path = tmp_path / "pg.yaml"
    path.write_text(f"""
pipeline: pg
topics: {{a: {{}}, b: {{}}}}
processors:
  x: {{class: "tests.apps.monoids:ValueSum", inputs: [a], outputs: [b],
       state: {{backend: postgres, dsn: "{dsn}"}}}}
""")
    pipeline = parse_pipeline(path.read_text())
    held = pipeline.processors["x"].state.dsn
    assert isinstance(held, Secret) and reveal(held) == dsn
    assert password not in repr(pipeline) and password not in str(pipeline.processors["x"].state)
    done = run_stylus("validate", str(path))
    assert done.returncode == 0, done.stderr
    assert password not in done.stdout + done.stderr
    done = run_stylus("-v", "run", str(path), "--exit-when-idle", "1", bootstrap=bootstrap, timeout=90)
    assert done.returncode != 0
    assert "connection" in done.stderr.lower() and password not in done.stdout + done.stderr

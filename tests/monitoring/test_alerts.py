"""The generated alert rules, unit-tested with promtool on synthetic series."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from stylus.config import load_pipeline
from stylus.config.model import Pipeline
from stylus.monitoring.alerts import alert_rules, render_rules, scrape_config
from tests.support.cli import run_stylus
from tests.support.tools import needs

pytestmark = needs(shutil.which("promtool"), "promtool (Debian prometheus)")

DOC = {
    "pipeline": "alerting",
    "topics": {"in": {}, "mid": {}, "out": {}},
    "processors": {
        "a": {"class": "tests.apps.counting:Passthrough", "inputs": ["in"], "outputs": ["mid"],
              "semantics": {"output": "at_least_once"}, "alerts": {"lag_seconds": "2m", "for": "5m"}},
        "b": {"class": "tests.apps.counting:WordCount", "inputs": ["mid"], "outputs": ["out"],
              "checkpoint": {"interval": "10s"},
              "state": {"backup": {"uri": "file:///tmp/stylus-backups", "interval": "5m"}}},
    },
}


@pytest.fixture
def pipeline(tmp_path: Path) -> Pipeline:
    path = tmp_path / "alerting.yaml"
    path.write_text(yaml.safe_dump(DOC))
    return load_pipeline(path)


def S(metric: str, processor: str, values: str, **extra: str) -> dict[str, str]:
    labels = {"pipeline": "alerting", "processor": processor, **extra}
    body = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{metric}{{{body}}}", "values": values}


def expect(rules: dict[str, Any], alert: str, *processors: str) -> list[dict[str, Any]]:
    out = []
    for rule in rules["groups"][0]["rules"]:
        if rule["alert"] == alert and rule["labels"]["processor"] in processors:
            out.append({"exp_labels": dict(rule["labels"]), "exp_annotations": dict(rule["annotations"])})
    assert len(out) == len(processors)
    return out


def case(name: str, at: str, *processors: str, rules: dict[str, Any]) -> dict[str, Any]:
    return {"eval_time": at, "alertname": name, "exp_alerts": expect(rules, name, *processors)}


def running_both(minutes: int = 30) -> list[dict[str, str]]:
    return [S("stylus_processor_running", p, f"1x{minutes}") for p in ("a", "b")]


def unit_tests(rules: dict[str, Any]) -> dict[str, Any]:
    return {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {   # lag above 2m on `a` since minute 3: pending at 7m, firing once `for: 5m` has passed
                "interval": "1m",
                "input_series": [S("stylus_consumer_lag_seconds", "a", "30 30 30 180x15", topic="in", partition="0"),
                                 S("stylus_consumer_lag_seconds", "b", "5x18", topic="mid", partition="0"),
                                 *running_both()],
                "alert_rule_test": [case("StylusLagHigh", "7m", rules=rules),
                                    case("StylusLagHigh", "9m", "a", rules=rules)],
            },
            {   # lag growing on `b` (10 more records a minute), flat on `a`
                "interval": "1m",
                "input_series": [S("stylus_consumer_lag_messages", "a", "100x30", topic="in", partition="0"),
                                 S("stylus_consumer_lag_messages", "b", "0+10x30", topic="mid", partition="0"),
                                 *running_both()],
                "alert_rule_test": [case("StylusLagGrowing", "5m", rules=rules),
                                    case("StylusLagGrowing", "15m", "b", rules=rules)],
            },
            {   # `a` stops at minute 6; `b` is never scraped at all
                "interval": "1m",
                "input_series": [S("stylus_processor_running", "a", "1x5 0x20")],
                "alert_rule_test": [case("StylusProcessorDown", "0m", rules=rules),
                                    case("StylusProcessorDown", "2m", "b", rules=rules),
                                    case("StylusProcessorDown", "10m", "a", "b", rules=rules)],
            },
            {   # `b` checkpoints every minute until minute 5, then never again; `a` has no partitions
                "interval": "1m",
                "input_series": [S("stylus_last_checkpoint_timestamp_seconds", "b", "0+60x5 300x20"),
                                 S("stylus_assigned_partitions", "b", "2x25"),
                                 S("stylus_last_checkpoint_timestamp_seconds", "a", "0+60x3 180x20"),
                                 S("stylus_assigned_partitions", "a", "0x25"),
                                 *running_both()],
                "alert_rule_test": [case("StylusCheckpointsStalled", "5m", rules=rules),
                                    case("StylusCheckpointsStalled", "10m", "b", rules=rules)],
            },
            {   # `b`'s last backup ages past 2 x 5m + 1m at minute 12
                "interval": "1m",
                "input_series": [S("stylus_backup_age_seconds", "b", "0+60x20"), *running_both()],
                "alert_rule_test": [case("StylusBackupStale", "10m", rules=rules),
                                    case("StylusBackupStale", "15m", "b", rules=rules)],
            },
            {   # three dead letters on `a` at minute 6, none afterwards
                "interval": "1m",
                "input_series": [S("stylus_dead_letters_total", "a", "0x5 3x15"),
                                 S("stylus_dead_letters_total", "b", "0x20"), *running_both()],
                "alert_rule_test": [case("StylusDeadLetters", "5m", rules=rules),
                                    case("StylusDeadLetters", "7m", "a", rules=rules),
                                    case("StylusDeadLetters", "15m", rules=rules)],
            },
        ],
    }


def promtool_test(tmp_path: Path, rules_text: str, tests: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    (tmp_path / "rules.yml").write_text(rules_text)
    (tmp_path / "tests.yml").write_text(yaml.safe_dump(tests, sort_keys=False))
    return subprocess.run(["promtool", "test", "rules", "tests.yml"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)


def test_rules_pass_promtool_unit_tests(pipeline, tmp_path):
    rules = alert_rules(pipeline)
    check = subprocess.run(["promtool", "check", "rules", "/dev/stdin"], input=render_rules(pipeline),
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    done = promtool_test(tmp_path, render_rules(pipeline), unit_tests(rules))
    assert done.returncode == 0, done.stdout + done.stderr


def test_thresholds_come_from_the_yaml(pipeline, tmp_path):
    """The same unit tests fail against rules rendered with another lag threshold."""
    doc = yaml.safe_load(yaml.safe_dump(DOC))
    doc["processors"]["a"]["alerts"]["lag_seconds"] = "5m"
    path = tmp_path / "other.yaml"
    path.write_text(yaml.safe_dump(doc))
    other = load_pipeline(path)
    done = promtool_test(tmp_path, render_rules(other), unit_tests(alert_rules(pipeline)))
    assert done.returncode != 0
    assert "StylusLagHigh" in done.stdout + done.stderr
    a_rules = {r["alert"]: r for r in alert_rules(other)["groups"][0]["rules"] if r["labels"]["processor"] == "a"}
    assert a_rules["StylusLagHigh"]["expr"].endswith("> 300")
    assert a_rules["StylusLagHigh"]["for"] == "5m"
    assert "StylusBackupStale" not in a_rules  # `a` has no backup configured


def test_cli_prints_rules_and_scrape_config(pipeline, tmp_path):
    path = tmp_path / "alerting.yaml"
    done = run_stylus("alerts", str(path))
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(done.stdout) == alert_rules(pipeline)
    done = run_stylus("alerts", str(path), "--scrape-config", "--target", "127.0.0.1:9101",
                      "--output", str(tmp_path / "prometheus.yml"))
    assert done.returncode == 0, done.stderr
    (tmp_path / "alerting.rules.yml").write_text(render_rules(pipeline))
    check = subprocess.run(["promtool", "check", "config", "prometheus.yml"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    assert yaml.safe_load((tmp_path / "prometheus.yml").read_text()) == yaml.safe_load(
        scrape_config(pipeline, ["127.0.0.1:9101"]))

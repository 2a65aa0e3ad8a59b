"""The Spark session of a backfill: on a local master its JVM compiles with C1 only (the C2 compiler's CPU
competed with the Python workers on the same cores and never paid back within a backfill), and a user's
own Java options still win; Spark's Kafka source comes from the installed jars, through `spark.jars`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stylus.backfill.session import (
    DRIVER_JAVA_OPTIONS,
    LOCAL_JIT_OPTIONS,
    SPARK_JARS,
    kafka_source_jars,
    session_settings,
)


def jvm_option(spark: Any, name: str) -> str:
    jvm = spark.sparkContext._jvm
    bean = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean"))
    return str(bean.getVMOption(name).getValue())


def test_a_local_session_jvm_runs_without_the_c2_compiler(spark: Any) -> None:
    assert jvm_option(spark, "TieredStopAtLevel") == "1"


def test_only_local_masters_get_the_option_and_given_options_come_after_it() -> None:
    def settings(master: str | None, conf: dict[str, str] | None) -> dict[str, str]:
        return {k: v for k, v in session_settings(master, conf).items() if k != SPARK_JARS}

    assert settings("local[2]", None) == {DRIVER_JAVA_OPTIONS: LOCAL_JIT_OPTIONS}
    assert settings(None, {"a": "b"}) == {"a": "b", DRIVER_JAVA_OPTIONS: LOCAL_JIT_OPTIONS}
    given = settings("local[*]", {DRIVER_JAVA_OPTIONS: "-XX:TieredStopAtLevel=4"})[DRIVER_JAVA_OPTIONS]
    assert given.split() == [LOCAL_JIT_OPTIONS, "-XX:TieredStopAtLevel=4"]
    assert settings("spark://cluster:7077", {"a": "b"}) == {"a": "b"}
    assert settings("yarn", None) == {}


def test_the_kafka_source_jars_reach_the_session_after_the_users_own(spark: Any) -> None:
    """`make install` resolved jvm/spark/pom.xml into .jars/spark/: the connector, its token provider,
    kafka-clients and commons-pool2, and nothing PySpark ships itself (a second Spark, Scala or Hadoop)."""
    jars = kafka_source_jars()
    names = sorted(Path(j).name.rsplit("-", 1)[0] for j in jars)
    assert names == ["commons-pool2", "kafka-clients", "spark-sql-kafka-0-10_2.13",
                     "spark-token-provider-kafka-0-10_2.13"]
    assert session_settings("local[2]", {SPARK_JARS: "/mine.jar"})[SPARK_JARS].split(",") == ["/mine.jar", *jars]
    assert spark.conf.get(SPARK_JARS).split(",") == jars

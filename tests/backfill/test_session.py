"""The Spark session of a backfill: on a local master its JVM compiles with C1 only (the C2 compiler's CPU
competed with the Python workers on the same cores and never paid back within a backfill), and a user's
own Java options still win."""

from __future__ import annotations

from typing import Any

from stylus.backfill.session import DRIVER_JAVA_OPTIONS, LOCAL_JIT_OPTIONS, session_settings


def jvm_option(spark: Any, name: str) -> str:
    jvm = spark.sparkContext._jvm
    bean = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean"))
    return str(bean.getVMOption(name).getValue())


def test_a_local_session_jvm_runs_without_the_c2_compiler(spark: Any) -> None:
    assert jvm_option(spark, "TieredStopAtLevel") == "1"


def test_only_local_masters_get_the_option_and_given_options_come_after_it() -> None:
    assert session_settings("local[2]", None) == {DRIVER_JAVA_OPTIONS: LOCAL_JIT_OPTIONS}
    assert session_settings(None, {"a": "b"}) == {"a": "b", DRIVER_JAVA_OPTIONS: LOCAL_JIT_OPTIONS}
    given = session_settings("local[*]", {DRIVER_JAVA_OPTIONS: "-XX:TieredStopAtLevel=4"})[DRIVER_JAVA_OPTIONS]
    assert given.split() == [LOCAL_JIT_OPTIONS, "-XX:TieredStopAtLevel=4"]
    assert session_settings("spark://cluster:7077", {"a": "b"}) == {"a": "b"}
    assert session_settings("yarn", None) == {}

"""Where the JVM parts (Apache Kafka, the HDFS minicluster, Spark's Kafka source) keep their jars.

`make install` resolves each `jvm/NAME/pom.xml` from Maven Central into `.jars/NAME/` at the repository root
(scripts/install-jars.sh); `STYLUS_JARS` points elsewhere (an image that ships them). Nothing is downloaded at
run time.
"""

from __future__ import annotations

import os
from pathlib import Path

JARS_ENV = "STYLUS_JARS"
_REPO_JARS = Path(__file__).resolve().parents[2] / ".jars"


class JarsMissing(RuntimeError):
    pass


def jar_dir(name: str) -> Path:
    """The folder of one part's jars; a clear error when it was never installed."""
    root = Path(os.environ.get(JARS_ENV) or _REPO_JARS)
    folder = root / name
    if not any(folder.glob("*.jar")):
        raise JarsMissing(f"no jars for {name!r} in {folder}: run `make install` (it resolves jvm/{name}/pom.xml "
                          f"from Maven Central), or set {JARS_ENV} to a folder holding {name}/*.jar")
    return folder


def classpath(name: str) -> str:
    return str(jar_dir(name) / "*")


def java_binary() -> str:
    """`$JAVA_HOME/bin/java` when set, else `java` from PATH."""
    home = os.environ.get("JAVA_HOME")
    return str(Path(home) / "bin" / "java") if home else "java"

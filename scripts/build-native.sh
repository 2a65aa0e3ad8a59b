#!/usr/bin/env bash
# Builds the framework's two C modules for the interpreter given (default .venv/bin/python) into the stylus
# package folder given (default stylus/ of this checkout; the image builds them into the installed package):
# - stylus/kafka/_columnar (stylus/kafka/columnar.py): compiled with librdkafka's headers (Debian's
#   librdkafka-dev) and linked to the very librdkafka file that confluent-kafka's own C module loads, so both
#   call one library in the process;
# - stylus/core/batch/_json_columns (stylus/core/batch/json_columns.py): JSON objects into Arrow columns.
set -euo pipefail
PY=${1:-.venv/bin/python}
cd "$(dirname "$0")/.."
DIR=${2:-stylus}
read -r cimpl version include suffix < <("$PY" - <<'PYTHON'
import sysconfig

import confluent_kafka
from confluent_kafka import cimpl

print(cimpl.__file__, confluent_kafka.__version__, sysconfig.get_paths()["include"],
      sysconfig.get_config_var("EXT_SUFFIX"))
PYTHON
)
lib=$(ldd "$cimpl" | awk '/librdkafka/ {print $3; exit}')
if [ -z "$lib" ] || [ ! -f "$lib" ]; then
  echo "build-native: cannot find the librdkafka that $cimpl loads" >&2
  exit 1
fi
flags=(-O2 -Wall -Wextra -Wno-unused-parameter -Werror -shared -fPIC -I"$include")
out="$DIR/kafka/_columnar$suffix"
gcc "${flags[@]}" -DCONFLUENT_KAFKA_VERSION="\"$version\"" \
  -o "$out" stylus/kafka/_columnar.c "$lib" -Wl,-rpath,"$(dirname "$lib")"
echo "built $out (confluent-kafka $version, $(basename "$lib"))"
out="$DIR/core/batch/_json_columns$suffix"
gcc "${flags[@]}" -o "$out" stylus/core/batch/_json_columns.c
echo "built $out"

#!/usr/bin/env bash
# Builds stylus/kafka/_columnar (stylus/kafka/columnar.py) for the interpreter given (default .venv/bin/python)
# into the folder given (default stylus/kafka of this checkout; the image builds it into the installed package):
# compiled with librdkafka's headers (Debian's librdkafka-dev) and linked to the very librdkafka file that
# confluent-kafka's own C module loads, so both call one library in the process.
set -euo pipefail
PY=${1:-.venv/bin/python}
cd "$(dirname "$0")/.."
DIR=${2:-stylus/kafka}
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
out="$DIR/_columnar$suffix"
gcc -O2 -Wall -Werror -shared -fPIC -I"$include" -DCONFLUENT_KAFKA_VERSION="\"$version\"" \
  -o "$out" stylus/kafka/_columnar.c "$lib" -Wl,-rpath,"$(dirname "$lib")"
echo "built $out (confluent-kafka $version, $(basename "$lib"))"

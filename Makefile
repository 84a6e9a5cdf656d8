# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
SUM := $(shell cksum pyproject.toml | cut -d' ' -f1)
# Two installs: the simulator and service alone (what `make demo` needs), and
# everything the tests use (torch's CPU build, Ray, the docs tools, ...).
STAMP := $(VENV)/.installed-$(SUM)
BASE_STAMP := $(VENV)/.installed-base-$(SUM)

.PHONY: demo test test-long docs lint bench clean

$(BASE_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	rm -f $(VENV)/.installed-base-*
	touch $(BASE_STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[test,docs,examples,ray,gpu,plot]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP) $(BASE_STAMP)

# The baselines, Tiresias, Gandiva and Philly's scheduler on the whole Philly
# trace, on Philly's cluster scaled to 0.17 (422 GPUs, offered load 0.89);
# writes demo-out/report.html. Jobs get Gavel job types so Gandiva can pack.
demo: $(BASE_STAMP)
	$(VENV)/bin/corral compare --trace philly --cluster philly --cluster-scale 0.17 \
		--job-types gavel --policies fifo,philly,las,tiresias-las,tiresias-gittins,gandiva,srtf \
		--out demo-out

# corral's bytecode is written once before the tests: where the shell forbids
# writing it (PYTHONDONTWRITEBYTECODE), each of the suite's processes
# (services, launchers, jobs, commands) would compile corral again (0.5 s a service).
test: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/mypy
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir .pytest_cache/site
	$(PY) -m compileall -q src
	$(PY) -m pytest -n 4 --dist loadfile -m "not long"

# The long tests (marked long: real-process tests of minutes, more seeds of the
# randomised ones), then the live-against-simulator timing comparison on its own.
test-long: $(STAMP)
	$(PY) -m compileall -q src
	$(PY) -m pytest -n 4 --dist loadfile -m long --ignore tests/e2e/test_parity.py
	$(PY) -m pytest tests/e2e/test_parity.py  # alone: it compares live timing with the simulator

# The documentation site (MkDocs, Material theme) into site/: open site/index.html.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

bench: $(STAMP)
	$(PY) benchmarks/sim_speed.py
	$(PY) benchmarks/service.py

clean:
	rm -rf $(VENV) demo-out runs site .pytest_cache .ruff_cache

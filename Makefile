# The two commands of the README. Each creates .venv on a fresh machine (Python 3.11 + pip).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python

.PHONY: demo test bench notebooks lint clean-venv

$(PY):
	$(PYTHON) -m venv $(VENV)

# Re-install only when pyproject.toml changes.
$(VENV)/.stamp-run: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e .
	touch $@

$(VENV)/.stamp-dev: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.stamp-run

demo: $(VENV)/.stamp-run
	$(VENV)/bin/specdec demo

test: $(VENV)/.stamp-dev
	$(PY) -m pytest

# autoregressive vs speculative on the bundled pair; writes bench-results/ (see docs/benchmarks.md)
bench: $(VENV)/.stamp-dev
	$(VENV)/bin/specdec bench

# re-execute the notebooks from their jupytext sources and refresh docs/figures/
notebooks: $(VENV)/.stamp-dev
	$(PY) notebooks/render.py

lint: $(VENV)/.stamp-dev
	$(VENV)/bin/ruff check .

clean-venv:
	rm -rf $(VENV)

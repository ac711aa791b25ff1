# The two commands of the README. Each creates .venv on a fresh machine (Python 3.11 + pip).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python

.PHONY: demo test oracle oracle-gpu bench notebooks lint clean-venv

$(PY):
	$(PYTHON) -m venv $(VENV)

# Re-install only when pyproject.toml changes.
$(VENV)/.stamp-run: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e .
	touch $@

# the oracle alone: the core + numpy, scipy, pytest, hypothesis (no torch, no matplotlib)
$(VENV)/.stamp-oracle: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[oracle]'
	touch $@ $(VENV)/.stamp-run

$(VENV)/.stamp-dev: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.stamp-run $(VENV)/.stamp-oracle

demo: $(VENV)/.stamp-run
	$(VENV)/bin/specdec demo

# everything, then the oracle once more against the GPU twin (gpu/; NumPy mode without a device)
test: $(VENV)/.stamp-dev
	$(PY) -m pytest
	$(MAKE) --no-print-directory oracle-gpu

# the statistical oracle only (`pytest -m distribution`); grade your own verify with
#   make oracle ARGS=--verify=path/to/my_verify.py:verify
oracle: $(VENV)/.stamp-oracle
	$(PY) -m pytest -m distribution $(ARGS)

# the same oracle grading the twin's verify and loop
oracle-gpu: $(VENV)/.stamp-oracle
	$(PY) -m pytest -m distribution --verify=gpu.verification:verify \
		--speculative=gpu.speculative:speculative_generate \
		--batch=gpu.batch:speculative_generate_batch $(ARGS)

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

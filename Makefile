# nccl-autotuner: `make demo` and `make test` set everything up on a fresh clone.
#
# CPU (this repo's CI, laptops): torch's CPU wheel + fbgemm-gpu-cpu + torchrec.
# GPU cluster: `make setup FLAVOR=cuda` installs the CUDA builds instead (see README).

PYTHON   ?= python3
VENV     ?= .venv
BIN      := $(VENV)/bin
FLAVOR   ?= cpu
TORCH_VERSION   ?= 2.13.0
FBGEMM_VERSION  ?= 1.8.0
TORCHREC_VERSION ?= 1.8.0
# torchrec declares `fbgemm-gpu` (the CUDA build); on CPU it is installed --no-deps with its real deps.
TORCHREC_DEPS := tensordict tqdm pyre-extensions "torchmetrics==1.0.3" numpy
FBGEMM_cpu  := fbgemm-gpu-cpu==$(FBGEMM_VERSION)
FBGEMM_cuda := fbgemm-gpu==$(FBGEMM_VERSION)
STAMP := $(VENV)/.installed-$(FLAVOR)

.PHONY: setup demo test test-fast lint bench gpu-check landscape clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet "torch==$(TORCH_VERSION)" "$(FBGEMM_$(FLAVOR))"
	$(BIN)/pip install --quiet --no-deps "torchrec==$(TORCHREC_VERSION)"
	$(BIN)/pip install --quiet $(TORCHREC_DEPS)
	$(BIN)/pip install --quiet -e ".[dev]"
	$(BIN)/python -c "import torch, torchrec, fbgemm_gpu, autotuner, api, trials"
	touch $@

demo: setup
	$(BIN)/python -m autotuner.demo $(if $(KEEP),--keep)

test: setup
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: setup
	$(BIN)/python -m pytest -m "not slow and not slurm and not postgres and not browser" $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check autotuner api trials bench tests
	$(BIN)/ruff format --check autotuner api trials bench tests

bench: setup
	$(BIN)/python -m bench.run

# On a GPU node (after `make setup FLAVOR=cuda`): the dense trial on CUDA + NCCL, every precision,
# the sparse_dist and semi_sync pipelines; writes bench/out/gpu-check.json (< 5 min).
gpu-check:
	$(BIN)/python -m bench.gpu_check

# Re-record the grid the search benchmark replays (real launches, ~5 min; the result is committed).
landscape: setup
	$(BIN)/python -m bench.record_landscape --workload deploy/examples/workload-demo.json \
		--space bench/data/space-landscape.yaml --repeats 2 --iterations 15 --warmup 3 \
		--out bench/data/landscape-cpu.json

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache

# Every target is idempotent; `make test` and `make demo` bring up everything they need.
#
#   make setup                       .venv with torch 2.13.0 (CPU), TensorFlow 2.21, this package
#   make setup CONSTRAINTS=my.txt    other pins (a cluster's own wheel versions)
#   make setup FRAMEWORKS=system     use the torch/TensorFlow already installed (module load ...)
#   make data                        fetch + verify MNIST into $(MNIST_DIR)
#   make test | make test-fast | make test-scaling | make test-gpu | make demo | make preflight | make sizes | make lint

PYTHON      ?= python3
VENV        ?= .venv
CONSTRAINTS ?= constraints/cpu.txt
FRAMEWORKS  ?= pip
MNIST_DIR   ?= data/mnist
EXTRAS      ?= dev,plot,report,tensorboard

PY    := $(VENV)/bin/python
# A recipe line fails when any command of its pipeline fails (the demo filters TF's log lines).
SHELL       := bash
.SHELLFLAGS := -o pipefail -c
STAMP := $(VENV)/.installed

ifeq ($(FRAMEWORKS),system)
VENV_FLAGS := --system-site-packages
ALL_EXTRAS := $(EXTRAS)
else
VENV_FLAGS :=
ALL_EXTRAS := torch,tf,$(EXTRAS)
endif

export MNIST_DIR

# pip compiles the bytecode of every module it installs, on one process (half of setup's minute
# on [B]); the modules a run imports are compiled on their first import instead, so Python must
# be let write bytecode where a host forbids it.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: setup data test test-fast test-common test-torch test-tf test-slurm test-scaling test-gpu demo preflight sizes docs lint clean

setup: $(STAMP)

# Re-installs only when the package definition or the pins change. A .venv shared by several
# checkouts (VENV=../first/.venv) is re-installed by whichever checkout's pyproject.toml is newer
# than its stamp, and its editable install then points at that checkout: a `python -m` outside
# the tests may import another checkout's code. The tests always import their own checkout
# (tests/conftest.py puts it first on every process's path).
$(STAMP): pyproject.toml $(CONSTRAINTS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV_FLAGS) $(VENV)
	$(PY) -m pip install --quiet --no-compile --constraint $(CONSTRAINTS) --editable ".[$(ALL_EXTRAS)]"
	$(PY) -c "import common, numpy, yaml; print('setup ok: numpy', numpy.__version__)"
	touch $@

data: setup
	$(PY) -m common.data fetch --dir $(MNIST_DIR)

# Two pytest-xdist workers in two lanes (tests/lanes.py): the files that mostly wait run on the
# second beside the SLURM tier on the first, then both take the rest, each file whole on one
# worker. Without -n 2 --lanes: one file after another. Torch ranks of the tests that are not about
# launching start from a warm interpreter (tests/warm_ranks.py).
test: setup data
	$(PY) -m pytest -n 2 --lanes -m "not scaling" tests

# What needs the cores to itself: on the SLURM test cluster over shaped links (root), each
# strategy's bytes and added step time against the accounting and the projection
# (tests/slurm/test_shaped_links.py), and each strategy on 2 and 4 nodes, the 2-node run projected
# to 4 (tests/slurm/test_projection_across_nodes.py); the preflight's link profiles on 2 ranks and
# 2 nodes; the benchmark; the failure-cost bench; test sessions stopped mid-job (four nested
# sessions with SLURM jobs). .ci/run runs it after make test.
test-scaling: setup data
	$(PY) -m pytest -m scaling tests

# The inner loop: every test of a file that starts no process (tests/tiers.py), in a minute or two.
test-fast: setup data
	$(PY) -m pytest -m "not processes" tests

test-common: setup data
	$(PY) -m pytest tests/common

test-torch: setup data
	$(PY) -m pytest tests/torch

test-tf: setup data
	$(PY) -m pytest tests/tf

test-slurm: setup data
	$(PY) -m pytest tests/slurm

# The GPU tier: each framework on the GPUs it sees (skipped, with the reason, where it sees none).
# The default pins (constraints/cpu.txt) install CPU builds: on a GPU machine, make setup with
# pins of CUDA builds (CONSTRAINTS=...) or FRAMEWORKS=system first.
test-gpu: setup data
	$(PY) -m pytest -m gpu tests/gpu

# The main job, end to end on this machine: the MLP on real MNIST, 2 epochs, with torch single,
# DDP and FSDP2 and TensorFlow MWMS on 1 and 2 local processes, each framework's link profile
# of the same 2 processes (seconds), each harness against its framework's plain loop (the
# bench, 3 repeats), then the comparison report: why each step takes what it takes, fsdp2
# against ddp in parts, each framework's harness ratio, and both projected to 8 and 64 workers.
DEMO_DIR ?= results/demo
DEMO_RUN  = --config configs/mlp_adam.yaml --set train.epochs=2 --set train.target_accuracy=0.96 \
            --set output.dir=$(DEMO_DIR) \
            --set train.log_every_steps=20
# TensorFlow 2.21 logs a few C++ lines before absl is initialized, whatever TF_CPP_MIN_LOG_LEVEL
# says; the demo drops them from its output (pipefail keeps a failing run failing).
TF_NOISE  = grep -v "[IWE]0000 \|absl::InitializeLog\|oneDNN\|cpu_feature_guard\|rebuild TensorFlow"
LAUNCH2   = $(PY) -m common.launch --nproc 2 --

demo: setup data
	rm -rf $(DEMO_DIR)
	$(PY) -m torch_impl.train $(DEMO_RUN) --set torch.strategy=single --set output.run_name=torch-single-w1
	$(LAUNCH2) $(PY) -m torch_impl.train $(DEMO_RUN) --set torch.strategy=ddp --set output.run_name=torch-ddp-w2
	$(LAUNCH2) $(PY) -m torch_impl.train $(DEMO_RUN) --set torch.strategy=fsdp2 --set output.run_name=torch-fsdp2-w2
	$(PY) -m tf_impl.train $(DEMO_RUN) --set output.run_name=tf-mwms-w1 2>&1 | $(TF_NOISE)
	$(LAUNCH2) $(PY) -m tf_impl.train $(DEMO_RUN) --set output.run_name=tf-mwms-w2 2>&1 | $(TF_NOISE)
	$(LAUNCH2) $(PY) -m torch_impl.links --out $(DEMO_DIR)/links-torch.json --max-bytes 2097152
	$(LAUNCH2) $(PY) -m tf_impl.links --out $(DEMO_DIR)/links-tf.json --max-bytes 2097152 2>&1 | $(TF_NOISE)
	$(PY) -m common.tools.bench --models mlp --strategies single,mwms --tf-ranks 1 --nproc 1 \
	    --pipelines tensor --repeats 3 --out $(DEMO_DIR)/bench.json 2>&1 | $(TF_NOISE)
	$(PY) compare.py $(DEMO_DIR) --project 8,64 --out $(DEMO_DIR)/report

# The model-size axis on this machine (common.tools.sizes): 0.1M to 300M parameters, synthetic data,
# torch single/ddp/fsdp1/fsdp2 and TensorFlow MWMS on 2 ranks, then compare.py's report.
SIZES_DIR ?= results/sizes
sizes: setup
	rm -rf $(SIZES_DIR)
	$(PY) -m common.tools.sizes --out $(SIZES_DIR) 2>&1 | $(TF_NOISE)

# Check this machine before a sweep: both frameworks on 2 local ranks (common.tools.preflight).
preflight: setup data
	$(PY) -m common.tools.preflight --nproc 2 2>&1 | $(TF_NOISE)

# The reference pages in docs/reference/, from the code (tests/common/test_docs.py: not stale).
docs: setup
	$(PY) -m common.tools.docs

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info

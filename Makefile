# Every target is idempotent; `make test` and `make demo` bring up everything they need.
#
#   make setup                       .venv with torch 2.13.0 (CPU), TensorFlow 2.21, this package
#   make setup CONSTRAINTS=my.txt    other pins (a cluster's own wheel versions)
#   make setup FRAMEWORKS=system     use the torch/TensorFlow already installed (module load ...)
#   make data                        fetch + verify MNIST into $(MNIST_DIR)
#   make test | make demo | make lint

PYTHON      ?= python3
VENV        ?= .venv
CONSTRAINTS ?= constraints/cpu.txt
FRAMEWORKS  ?= pip
MNIST_DIR   ?= data/mnist
EXTRAS      ?= dev,plot

PY    := $(VENV)/bin/python
STAMP := $(VENV)/.installed

ifeq ($(FRAMEWORKS),system)
VENV_FLAGS := --system-site-packages
ALL_EXTRAS := $(EXTRAS)
else
VENV_FLAGS :=
ALL_EXTRAS := torch,tf,$(EXTRAS)
endif

export MNIST_DIR

.PHONY: setup data test test-common test-torch test-tf test-slurm demo lint clean

setup: $(STAMP)

# Re-installs only when the package definition or the pins change.
$(STAMP): pyproject.toml $(CONSTRAINTS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV_FLAGS) $(VENV)
	$(PY) -m pip install --quiet --constraint $(CONSTRAINTS) --editable ".[$(ALL_EXTRAS)]"
	$(PY) -c "import common, numpy, yaml; print('setup ok: numpy', numpy.__version__)"
	touch $@

data: setup
	$(PY) -m common.data fetch --dir $(MNIST_DIR)

test: setup data
	$(PY) -m pytest tests

test-common: setup data
	$(PY) -m pytest tests/common

test-torch: setup data
	$(PY) -m pytest tests/torch

test-tf: setup data
	$(PY) -m pytest tests/tf

test-slurm: setup data
	$(PY) -m pytest tests/slurm

demo: setup data
	$(PY) -m common.data summary --dir $(MNIST_DIR)

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info

# What a newcomer runs: `make demo`, `make test`, then `make fleet`. Each works on a fresh
# machine: they create the virtualenv and install the pinned tools (hack/tools.sh, cached
# under ~/.cache/modelplane) before doing anything else.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell sha256sum pyproject.toml | cut -c1-12)

.PHONY: demo render test test-unit test-e2e fuzz-long fleet fleet-down venv tools lint fmt package proto clean

# The examples rendered as one fleet: a summary, then the YAML stream's file name.
demo: venv
	@bash hack/tools.sh crossplane
	@$(PY) hack/demo.py --output _output/demo.yaml

# The same fleet render's whole YAML stream on stdout (for scripts and CI).
render: venv
	@bash hack/tools.sh crossplane >&2
	@$(PY) hack/render.py --fleet

# Two pytest-xdist workers: one takes the end-to-end tier (its fleet box mostly waits on
# events), the other the tier's real-engine modules, then the rest, module by module
# (tests/conftest.py).
TEST_WORKERS ?= 2

test: venv proto tools lint
	$(PY) -m pytest -n $(TEST_WORKERS) --durations=30

test-unit: venv proto
	$(PY) -m pytest tests/unit

test-e2e: venv proto tools
	$(PY) -m pytest tests/e2e

# The fuzz tier at 200 examples per test (the CI default is 30): a longer, benchmark-like
# run that hunts deeper (tests/fuzz/profile.py).
fuzz-long: venv proto
	MODELPLANE_FUZZ_EXAMPLES=200 $(PY) -m pytest tests/fuzz/test_functions_fuzz.py tests/fuzz/test_inputs_fuzz.py -p no:randomly

# The local fleet, live: a control plane (Crossplane core, provider-kubernetes, our
# functions) and two member API servers on loopback, with examples/ applied. It keeps
# running until `make fleet-down`. `make fleet FLEET_REAL=us-east-1` also serves for real
# there: the LeaderWorkerSet controller, and real vLLM processes for pods labelled
# modelplane.test/run=real (installs the LWS controller and vLLM's CPU build first).
fleet: venv proto
	@bash hack/tools.sh crossplane crossplane_core provider_kubernetes etcd kube_apiserver kwok schemas keda $(if $(FLEET_REAL),lws vllm coredns)
	@MODELPLANE_FLEET_REAL=$(FLEET_REAL) $(PY) hack/fleetbox up

fleet-down: venv
	@$(PY) hack/fleetbox down

venv: $(STAMP)

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) not found: install Python 3.11" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q -e '.[dev]'
	@rm -f $(VENV)/.installed-*; touch $@

tools:
	bash hack/tools.sh

# The KEDA external scaler stubs, generated from functions/runtime/scaler/proto by the pinned
# grpcio-tools (never committed).
proto: venv
	$(PY) hack/gen_proto.py

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

fmt: venv
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

package: venv
	@bash hack/tools.sh crossplane
	bash hack/package.sh --all _output

clean:
	rm -rf $(VENV) _output .pytest_cache

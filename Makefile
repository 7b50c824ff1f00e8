# RLix developer entry points. `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The control-plane toolchain lives outside the checkout, cached by version.
TOOLCHAIN_BIN = $(shell hack/toolchain.sh --print)
CLUSTER ?= rlix-dev
NODES ?= 4
GPUS ?= 8
GPU_MEMORY_MIB ?= 81920
# Where make gpu-check writes its JSON: not bench/results, whose gpu_interference.json is the
# simulator's shipped matrix and must change only on purpose.
GPU_OUT ?= build/gpu
REAL_NODES ?= 0
PYTEST_ARGS ?=
CHAOS_ARGS ?=

export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "; printf "Usage: make <target> [VAR=value]\n\nTargets:\n"} \
		/^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@printf "\nVariables: CLUSTER=$(CLUSTER) NODES=$(NODES) REAL_NODES=$(REAL_NODES) GPUS=$(GPUS) GPU_MEMORY_MIB=$(GPU_MEMORY_MIB) KUBECONFIG=<existing cluster>\n"

# A new environment takes about 7 GiB (torch and its CUDA libraries); check
# first, so a full disk is one clear line instead of pip's OSError halfway.
VENV_MIN_FREE_GIB ?= 8

$(VENV)/.installed: pyproject.toml constraints.txt
	@echo "==> creating $(VENV) and installing rlix[dev] (pinned)"
	@test -x $(PY) || { free=$$(df -Pk . | awk 'NR == 2 {print int($$4 / 1048576)}'); \
		if [ "$$free" -lt $(VENV_MIN_FREE_GIB) ]; then \
		echo "error: $(VENV) needs about 7 GiB and $$free GiB is free here (df -h $(CURDIR));" \
			"free some space, or set VENV_MIN_FREE_GIB=<GiB> to try anyway" >&2; exit 1; fi; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip==25.3
	@$(PY) -m pip install -q -c constraints.txt -e '.[dev,test-torch,trl,rllib]'
	@touch $@

.PHONY: venv
venv: $(VENV)/.installed ## Create the virtual environment with pinned dependencies

.PHONY: deps-lowest
deps-lowest: ## Install the client (base + cli) at every range's lower bound in a throwaway venv (needs PyPI) and run its tests
	hack/deps-lowest.sh

.PHONY: toolchain
toolchain: ## Build (or reuse) kube-apiserver/scheduler/controller-manager, etcd, kwok, helm
	@hack/toolchain.sh >/dev/null

.PHONY: lint
lint: venv ## ruff, mypy --strict, import-linter (core stays pure)
	$(VENV)/bin/ruff check rlix tests e2e hack bench
	$(VENV)/bin/ruff format --check rlix tests e2e hack bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

.PHONY: fmt
fmt: venv ## Format and autofix with ruff
	$(VENV)/bin/ruff format rlix tests e2e hack bench
	$(VENV)/bin/ruff check --fix rlix tests e2e hack bench

.PHONY: test
test: venv toolchain node-deps lint verify ## Every tier CI can run: core, components, real control plane, real node, the client at its lowest dependency bounds
	RLIX_TOOLCHAIN_BIN=$(TOOLCHAIN_BIN) $(PY) -m pytest $(PYTEST_ARGS)
	@$(MAKE) --no-print-directory test-node
	@$(MAKE) --no-print-directory deps-lowest
	@hack/kind-up.sh --check
	@$(MAKE) --no-print-directory gpu-check

.PHONY: node-deps
node-deps: ## Debian packages the real test node needs (runc, CNI plugins, debootstrap, umoci, gcc); no-op when present
	@hack/node-deps.sh

.PHONY: images
images: venv toolchain node-deps ## OCI archives of operator, extender, node agent and kube-scheduler under build/images (no registry, no Docker)
	RLIX_TOOLCHAIN_BIN=$(TOOLCHAIN_BIN) hack/images.sh build/images

.PHONY: test-node
test-node: venv toolchain node-deps ## The real-node tier: a kubelet + containerd node beside the kwok nodes (needs root)
	RLIX_TOOLCHAIN_BIN=$(TOOLCHAIN_BIN) $(PY) -m pytest e2e -m realnode $(PYTEST_ARGS)

.PHONY: test-fast
test-fast: venv ## Tiers 1-2 only (no control plane)
	$(PY) -m pytest tests $(PYTEST_ARGS)

.PHONY: test-cluster
test-cluster: venv toolchain ## Tier 3 only: the real local control plane (or kind: RLIX_E2E_KUBECONFIG=...)
	RLIX_TOOLCHAIN_BIN=$(TOOLCHAIN_BIN) $(PY) -m pytest e2e $(PYTEST_ARGS)

.PHONY: generate
generate: venv ## Regenerate crds/ (and the chart's copy) from the RLJob models in rlix/core/rljob.py
	$(PY) hack/generate_crds.py
	cp crds/rlix.io_rljobs.yaml charts/rlix/crds/rlix.io_rljobs.yaml

.PHONY: protos
protos: venv ## Regenerate the kubelet API messages (rlix/agent/kubelet_api/*_pb2.py) from their .proto files
	PYTHON=$(PY) hack/protos.sh

.PHONY: verify
verify: venv ## Fail if crds/ or the chart's CRDs drifted from the models, or the kubelet API messages from their .proto
	$(PY) hack/generate_crds.py --check
	@tmp=$$(mktemp -d) && PYTHON=$(PY) hack/protos.sh $$tmp && \
		diff -r -x '*.proto' -x '__init__.py' -x '__pycache__' rlix/agent/kubelet_api $$tmp; \
		rc=$$?; rm -rf $$tmp; [ $$rc -eq 0 ] || { echo "rlix/agent/kubelet_api drifted from its .proto: run 'make protos'"; exit 1; }
	@diff -u crds/rlix.io_rljobs.yaml charts/rlix/crds/rlix.io_rljobs.yaml || \
		{ echo "charts/rlix/crds drifted from crds/: run 'make generate'"; exit 1; }

.PHONY: cluster-up
cluster-up: venv toolchain $(if $(filter-out 0,$(REAL_NODES)),node-deps) ## Start a local cluster with fake GPU nodes, plus a real kubelet node with REAL_NODES=1 (safe to re-run)
	$(VENV)/bin/rlix cluster up --name $(CLUSTER) --nodes $(NODES) --gpus $(GPUS) --gpu-memory-mib $(GPU_MEMORY_MIB) --real-nodes $(REAL_NODES)

.PHONY: cluster-down
cluster-down: venv ## Stop the local cluster and remove its state
	$(VENV)/bin/rlix cluster down --name $(CLUSTER)

.PHONY: kind-up
kind-up: ## kind cluster + kwok fake GPU nodes (needs a Docker engine; skips without one)
	@hack/kind-up.sh

.PHONY: demo-compare
demo-compare: venv toolchain ## The demo's jobs twice on one cluster, exclusive default scheduling vs RLix; results in docs/demo-compare/
	RLIX_TOOLCHAIN_BIN=$(TOOLCHAIN_BIN) $(VENV)/bin/rlix demo --compare --out docs/demo-compare

.PHONY: demo
demo: venv toolchain ## The one-command demo: local cluster, all of RLix, eight RL jobs, a summary (KUBECONFIG=... for an existing cluster)
	RLIX_TOOLCHAIN_BIN=$(TOOLCHAIN_BIN) $(VENV)/bin/rlix demo $(if $(KUBECONFIG),--kubeconfig $(KUBECONFIG))

.PHONY: bench
bench: venv toolchain ## Benchmarks (speed and memory, side by side) -> bench/results/
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/simulate.py
	$(PY) bench/simulate.py --mix disaggregated --no-compare
	$(PY) bench/simulate.py --mix small-lab --mix mixed-tenants --gpu-memory-utilization 0.9
	$(PY) bench/simulate.py --mix mixed-tenants --mix trace --top-grace 0 --class-grace 0
	$(PY) bench/simulate.py --mix agentic --mix small-lab --mix disaggregated --aging 2 --no-compare
	$(PY) bench/simulate.py --mix mixed-tenants --mix trace --aging 2 --no-compare
	$(PY) bench/sharing_rules.py
	$(PY) bench/extender_latency.py --uvicorn
	RLIX_TOOLCHAIN_BIN=$(TOOLCHAIN_BIN) $(PY) bench/operator_admission.py
	$(PY) bench/agent_latency.py
	$(PY) bench/phase_gate.py
	$(PY) bench/integration_overhead.py
	RLIX_TOOLCHAIN_BIN=$(TOOLCHAIN_BIN) $(PY) bench/scheduling_throughput.py --nodes 1000 --pods 500

.PHONY: bench-scale
bench-scale: venv ## The simulator at 1,000 nodes and 5,000 jobs, 3 seeds -> bench/results/scale.md (about an hour on 2 cores; not part of make bench)
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/simulate.py --mix scale --seeds 0 1 2 --no-compare

.PHONY: chaos
chaos: venv toolchain ## Chaos run: a few hundred RLJobs, operator/extender/agents SIGKILLed at random, suspensions in flight; invariants -> bench/results/chaos.md
	RLIX_TOOLCHAIN_BIN=$(TOOLCHAIN_BIN) $(PY) bench/chaos.py $(CHAOS_ARGS)

.PHONY: gpu-check
gpu-check: venv ## Tier 5 on a GPU machine: suspend/resume 1/16/64 GB vs the pinned-copy floor, relocation, driver checkpoint, two-process interference, MPS as RLix runs it (skips without a GPU)
	@$(PY) hack/gpu-check.py; rc=$$?; if [ $$rc -eq 77 ]; then echo "gpu tier skipped (no NVIDIA GPU here)"; exit 0; fi; \
		[ $$rc -eq 0 ] || exit $$rc; mkdir -p $(GPU_OUT); \
		$(PY) hack/gpu-interference.py --out $(GPU_OUT)/gpu_interference.json || exit $$?; \
		$(PY) hack/gpu-mps.py --out $(GPU_OUT)/gpu_mps.json; rc=$$?; \
		if [ $$rc -eq 77 ]; then echo "MPS part skipped (no nvidia-cuda-mps-control)"; rc=0; fi; \
		echo "raw results in $(GPU_OUT)/; bench/results/gpu_interference.json is the simulator's"; \
		echo "shipped matrix (MEASURED_H200_CELLS): copy a run over it only to change that default"; exit $$rc

.PHONY: clean
clean: ## Remove the virtual environment and build leftovers (keeps the toolchain cache)
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache

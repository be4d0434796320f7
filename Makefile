# The README's commands. Each target sets up what it needs on a bare machine.
PYTHON ?= python3.11
VENV   := .venv
LATEST := .venv-beam-latest
# The Beam-latest line runs what the Dataflow image runs: the Beam pinned in
# templates/dataflow/beam-version.txt, on Python $(LATEST_PY) (the Dockerfile's
# python:3.13-slim). Without a working python3.13 (an unset pyenv shim does not
# count) it falls back to $(PYTHON); the rule says which one it uses.
LATEST_PY     := 3.13
LATEST_PYTHON := $(or $(shell for p in python$(LATEST_PY) "$${PYENV_ROOT:-$$HOME/.pyenv}"/versions/$(LATEST_PY)*/bin/python$(LATEST_PY); do "$$p" -c 'import sys; print(sys.executable)' 2>/dev/null && break; done),$(PYTHON))
BEAM_VERSION  := $(shell cat templates/dataflow/beam-version.txt)
TOOLS  := .venv-tools
PIP    := pip install --quiet --disable-pip-version-check

# The Kafka broker and the Flink Kafka connector, fetched with mvn into .toolchain/.
include tools/toolchain/kafka.mk
# The Flink job's keyed operator, compiled against the installed PyFlink.
include tools/toolchain/flink.mk

.PHONY: check test test-dev test-dev-flink test-dev-rest test-latest envs lint protos demo demo-traces demo-streaming demo-flink soak bench fuzz mutate clean jaeger

# The dev environment: Beam 2.61 + PyFlink 2.3 (they must share one Beam line).
$(VENV)/.installed: pyproject.toml setup.py
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/$(PIP) -e '.[dev]'
	touch $@

# The Beam-latest line (what Dataflow runs), without Flink: exactly the image's
# Beam, on LATEST_PYTHON; a venv of another Python is recreated.
$(LATEST)/.installed: pyproject.toml setup.py templates/dataflow/beam-version.txt
	@$(LATEST_PYTHON) -c 'import sys; v = "%d.%d" % sys.version_info[:2]; print("Beam-latest line: apache-beam[gcp]==$(BEAM_VERSION) on Python", sys.version.split()[0], sys.executable + ("" if v == "$(LATEST_PY)" else " (no python$(LATEST_PY) found; the Dataflow image runs $(LATEST_PY))"))'
	test "$$($(LATEST)/bin/python -c 'import sys; print(sys.version_info[:2])' 2>/dev/null)" = \
	    "$$($(LATEST_PYTHON) -c 'import sys; print(sys.version_info[:2])')" || $(LATEST_PYTHON) -m venv --clear $(LATEST)
	$(LATEST)/bin/$(PIP) --upgrade -e '.[gcp,otel]' 'apache-beam[gcp]==$(BEAM_VERSION)' 'pytest>=8' \
	    'pytest-timeout>=2.3' 'hypothesis>=6.100' 'looptime>=0.9'
	touch $@

# checkov pins dependencies that clash with apache-beam, so it gets its own env.
$(TOOLS)/.installed: tools/checkov-requirements.txt
	test -x $(TOOLS)/bin/python || $(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/$(PIP) -r tools/checkov-requirements.txt
	touch $@

# The Firestore-protocol server the Firestore tests start (npm, pinned by the lockfile).
EMULATOR := tools/firestore-emulator
$(EMULATOR)/node_modules/.installed: $(EMULATOR)/package.json $(EMULATOR)/package-lock.json
	npm ci --prefix $(EMULATOR) --no-audit --no-fund --loglevel=error
	touch $@

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy src benchmarks

# The loop before a commit: lint, types and the unit tests, which need no
# server, runner or network. tests/unit/test_benchmarks.py runs the benchmark
# suite itself and is left to `make test`. See CONTRIBUTING.md for its time.
check: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy src benchmarks
	$(VENV)/bin/python -m pytest -q -p no:cacheprovider tests/unit \
	    --ignore=tests/unit/test_benchmarks.py

# The trace viewer the tracing tests and `make demo-traces` send spans to: Jaeger v2,
# built from the Go module proxy at the version in tools/jaeger/version.txt
# into a module of its own under the git-ignored .toolchain/ (about 6 minutes
# of one core on a bare machine, seconds with Go's caches in the home folder).
JAEGER_VERSION := $(shell cat tools/jaeger/version.txt)
JAEGER_DIR     := .toolchain/jaeger-$(JAEGER_VERSION)
JAEGER         := $(JAEGER_DIR)/jaeger
$(JAEGER): tools/jaeger/version.txt
	mkdir -p $(JAEGER_DIR)
	cd $(JAEGER_DIR) && (test -f go.mod || go mod init beam-agents.local/jaeger) \
	    && go get -tool github.com/jaegertracing/jaeger/cmd/jaeger@$(JAEGER_VERSION) \
	    && go build -o jaeger.partial github.com/jaegertracing/jaeger/cmd/jaeger \
	    && mv jaeger.partial jaeger
jaeger: $(JAEGER)

# Every environment the suite needs. They are independent, so `test` builds
# them side by side: on a bare machine that is most of its set-up time.
ENVS := $(VENV)/.installed $(LATEST)/.installed $(TOOLS)/.installed $(EMULATOR)/node_modules/.installed \
	kafka-toolchain $(FLINK_OPERATOR_JAR) $(JAEGER)
envs: $(ENVS)

# The suite runs as three pytest processes side by side: the dev line in two
# parts (its Flink suite, a third of its time, and the rest) and the
# Beam-latest line. The suite waits on model latency, servers and JVMs far
# more than it computes (one process keeps about one of two cores busy), and
# each part's output is printed whole once it ends.
TEST_PARTS := test-dev-flink test-dev-rest test-latest
test:
	$(MAKE) --no-print-directory -j4 envs
	$(MAKE) --no-print-directory lint
	mkdir -p .pytest-tmp
	$(MAKE) --no-print-directory -j$(words $(TEST_PARTS)) --output-sync=target $(TEST_PARTS)

# Everything, on the dev line (Beam 2.61 + PyFlink): its two parts.
test-dev: test-dev-flink test-dev-rest
DEV_PYTEST = CHECKOV=$(abspath $(TOOLS))/bin/checkov $(VENV)/bin/python -m pytest
DEV_ENVS = $(VENV)/.installed $(TOOLS)/.installed $(EMULATOR)/node_modules/.installed kafka-toolchain \
	$(FLINK_OPERATOR_JAR) $(JAEGER)
test-dev-flink: $(DEV_ENVS)
	$(DEV_PYTEST) --basetemp=$(abspath .pytest-tmp)/dev-flink tests/flink
test-dev-rest: $(DEV_ENVS)
	$(DEV_PYTEST) --basetemp=$(abspath .pytest-tmp)/dev --ignore=tests/flink --ignore=tests/portable
# The Beam-latest line: the core and the Beam adapter, on what Dataflow runs.
test-latest: $(LATEST)/.installed $(JAEGER)
	$(LATEST)/bin/python -m pytest --basetemp=$(abspath .pytest-tmp)/latest \
	    tests/unit/memory tests/unit/model tests/unit/runtime tests/beam tests/otel

protos: $(VENV)/.installed
	$(VENV)/bin/python tools/gen_protos.py

# The main job: the example support agent over examples/events.jsonl on the
# DirectRunner with the local model, which takes 100 ms a call, answers 503
# to four calls (a transient outage the engine rides out) and enforces a quota
# of 60 requests/s (429 + Retry-After, which admission learns to stay under);
# the summary prices the tokens paid. Intents and dead letters land in out/.
DEMO_FLAGS := --input_files examples/events.jsonl \
    --output_path out/intents.jsonl \
    --errors_path out/errors.jsonl \
    --agent examples.support_agent:agent \
    --model_latency_ms 100 --model_outage 40:4 --model_quota 60 \
    --model_price_in_per_mtok 0.15 --model_price_out_per_mtok 0.60 \
    --call_journal sqlite --call_journal_path out/calls.sqlite \
    --longterm_store sqlite --sqlite_path out/longterm.sqlite
demo: $(VENV)/.installed
	rm -rf out
	$(VENV)/bin/python -m beam_agents run $(DEMO_FLAGS)
	@echo "intents: out/intents.jsonl   dead letters: out/errors.jsonl"
	@echo "inspect them with: $(VENV)/bin/beam-agents errors show out/errors.jsonl"

# The main job with tracing on: Jaeger (built by `make jaeger` when missing)
# on free loopback ports, the run's spans and GenAI histograms sent to it,
# read back into out/traces.json with a summary and one activation's span
# tree on stdout; from a terminal Jaeger stays up until Enter, then stops.
# See docs/operations.md, "Traces".
demo-traces: $(VENV)/.installed $(JAEGER)
	rm -rf out
	$(VENV)/bin/python -m tools.jaeger.demo -- $(DEMO_FLAGS)
	@echo "intents: out/intents.jsonl   dead letters: out/errors.jsonl   spans: out/traces.json"

# The main job through Pub/Sub: the official emulator, a streaming run on its
# input subscription, examples/events.jsonl published at 50 lines/s, a live
# line (events/s, in flight, queued, p50/p99 publish -> outcome), then SIGINT,
# the run's summary and the driver's count. See docs/streaming.md.
demo-streaming: $(VENV)/.installed
	$(VENV)/bin/python -m tools.streaming.demo

# The main job as a streaming Flink job on Kafka: a Kafka broker (from its Maven
# jars, KRaft, one node), input/intents/errors topics, the native Flink job on a
# local MiniCluster with exactly-once Kafka sinks, examples/events.jsonl published
# at 50 lines/s, a live line, then make demo's summary. See docs/streaming.md.
demo-flink: $(VENV)/.installed kafka-toolchain $(FLINK_OPERATOR_JAR)
	$(VENV)/bin/python -m tools.streaming.flink_demo

# A 10-minute streaming soak at 15 events/s (what the local runner sustains
# here with both emulators on two cores; see docs/streaming.md) with a 503
# burst, a 429 quota, a Firestore restart and a SIGKILLed run on a schedule;
# writes benchmarks/results/soak.json and docs/soak.png. See docs/streaming.md.
# `make soak ENGINE=flink`: the same faults on the native Flink job from Kafka to
# Kafka, a standalone cluster whose task managers are SIGKILLed instead of the
# run, checked for 0 events lost and 0 intents duplicated; writes
# benchmarks/results/soak-flink.json and docs/soak-flink.png.
ENGINE ?= beam
soak: $(VENV)/.installed $(if $(filter flink,$(ENGINE)),kafka-toolchain $(FLINK_OPERATOR_JAR))
ifeq ($(ENGINE),flink)
	$(VENV)/bin/python -m tools.streaming.flink_soak --duration_s 600 --rate 15
else
	$(VENV)/bin/python -m tools.streaming.soak --duration_s 600 --rate 15
endif

# The benchmark suite: a table on stdout, benchmarks/results/latest.json and PNG plots.
# B12 (the portable runners) runs on the Beam-latest line, whose Prism runs streams.
bench: $(VENV)/.installed $(LATEST)/.installed $(JAEGER) kafka-toolchain $(FLINK_OPERATOR_JAR)
	$(VENV)/bin/python -m benchmarks --only B1,B2,B3,B4,B5,B6,B7,B8,B9,B10,B11,B13,B14,B15
	$(LATEST)/bin/python -m benchmarks --only B12 --merge

# Coverage-guided fuzzing (atheris) of every decoder of keyed state and input:
# 200 000 inputs for each of the 8 targets in fuzz/, one libFuzzer process per
# target. Prints inputs, crashes and seconds per target and writes
# fuzz/results/latest.json; crashing inputs land in fuzz/results/crashes/.
fuzz: $(VENV)/.installed
	$(VENV)/bin/python -m fuzz --runs 200000

# Mutation testing: mutmut over memory/, the replay cache, the cache key and the
# stores' seq guards, against their fast offline tests ([tool.mutmut] in
# pyproject.toml). A fresh run each time; prints killed, survived, timeout,
# total and the kill rate, and writes them with the survivors' names to
# mutate/results.json. `mutmut show NAME` shows one survivor's diff.
mutate: $(VENV)/.installed
	$(VENV)/bin/python tools/mutate.py --max-children 2

clean:
	rm -rf $(VENV) $(LATEST) $(TOOLS) .toolchain out .pytest_cache .pytest-tmp .hypothesis

# Toolchains beyond the venvs above (Prism, the Flink job server, ...), each
# pinned in its own file; they hook themselves into envs and test.
include $(filter-out tools/toolchain/kafka.mk tools/toolchain/flink.mk,\
    $(wildcard tools/toolchain/*.mk))

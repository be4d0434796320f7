# Beam's portable runners, fetched and built by the repository: Prism for each
# Beam line, the Flink job-server jar, a Flink cluster of the job server's
# minor version, and the Python that drives the FlinkRunner. Included from the
# Makefile; everything lands in git-ignored folders (.toolchain/, .venv-*/).
# docs/testing.md says what each is for.

TOOLCHAIN := .toolchain

# Prism, built from the Go module proxy at the Beam version of each line: the
# dev line's (read from pyproject's dev extra, its one pin) and the Beam-latest
# line's (the Dataflow pin).
DEV_BEAM_VERSION := $(shell sed -n 's/^ *"apache-beam\[gcp\]==\([0-9.]*\);.*/\1/p' pyproject.toml | head -n 1)
PRISM_DEV        := $(TOOLCHAIN)/prism-$(DEV_BEAM_VERSION)/prism
PRISM_LATEST     := $(TOOLCHAIN)/prism-$(BEAM_VERSION)/prism

# The FlinkRunner line. Maven Central as served here has no
# beam-runners-flink-*-job-server jar of any version, neither for the dev line
# (2.61.0) nor the Beam-latest line (2.77.0); it serves the Flink runner that
# jar is shaded from for Flink 1.19 at 2.62.0 and 2.70.0, and only 2.62.0's
# dependencies resolve (beam-runners-java-job-service 2.70.0 is not served).
# So the job server is shaded here from beam-runners-flink-1.19:2.62.0, and the
# FlinkRunner tests run on Beam 2.62.0 in a venv of their own, so the SDK
# harness and the job server are one Beam version. The cluster is Flink 1.19
# from the apache-flink 1.19 wheel (its bundled distribution; no Python deps).
FLINK_RUNNER_BEAM := 2.62.0
FLINK_MINOR       := 1.19
FLINK_WHEEL       := 1.19.3
JOB_SERVER_JAR    := $(TOOLCHAIN)/jars/beam-runners-flink-$(FLINK_MINOR)-job-server-$(FLINK_RUNNER_BEAM).jar
FLINK_VENV        := .venv-flink-$(FLINK_MINOR)
FLINK_RUNNER_VENV := .venv-beam-$(FLINK_RUNNER_BEAM)

# One line naming a missing tool and how to get it.
need = @command -v $(1) >/dev/null 2>&1 || { echo "toolchain: '$(1)' not found on PATH; $(2)" >&2; exit 1; }
NEED_GO   = $(call need,go,install Go 1.22 or newer (apt-get install golang-go, or a release from the Go project))
NEED_MVN  = $(call need,mvn,install Maven 3.8 or newer (apt-get install maven))
NEED_JAVA = $(call need,java,install a Java 17 runtime (apt-get install openjdk-17-jdk-headless))

.PHONY: toolchain prism job-server test-portable

# `go install` at the line's tag, into the line's folder. GOTOOLCHAIN=local: the
# Go on the machine builds it, nothing else is fetched.
$(TOOLCHAIN)/prism-%/prism:
	$(NEED_GO)
	mkdir -p $(@D)
	GOTOOLCHAIN=local GOBIN=$(abspath $(@D)) go install github.com/apache/beam/sdks/v2/go/cmd/prism@v$*
	@echo "built $@ (Prism of Beam $*)"

$(JOB_SERVER_JAR): tools/toolchain/flink-job-server/pom.xml tools/toolchain/portable.mk
	$(NEED_JAVA)
	$(NEED_MVN)
	mkdir -p $(@D)
	mvn -B -q -f tools/toolchain/flink-job-server/pom.xml package \
	    -Dbeam.version=$(FLINK_RUNNER_BEAM) -Dflink.minor=$(FLINK_MINOR) \
	    -Doutput.jar=$(abspath $@).part -Dbuild.dir=$(abspath $(TOOLCHAIN))/build/flink-job-server
	mv $@.part $@
	@echo "built $@"

# The cluster needs only the Java distribution the wheel bundles (bin/, lib/,
# conf/), so its Python dependencies stay out.
$(FLINK_VENV)/.installed: tools/toolchain/portable.mk
	$(NEED_JAVA)
	test -x $(FLINK_VENV)/bin/python || $(PYTHON) -m venv $(FLINK_VENV)
	$(FLINK_VENV)/bin/$(PIP) --no-deps 'apache-flink==$(FLINK_WHEEL)' 'apache-flink-libraries==$(FLINK_WHEEL)'
	touch $@

$(FLINK_RUNNER_VENV)/.installed: pyproject.toml setup.py tools/toolchain/portable.mk
	test -x $(FLINK_RUNNER_VENV)/bin/python || $(PYTHON) -m venv $(FLINK_RUNNER_VENV)
	$(FLINK_RUNNER_VENV)/bin/$(PIP) -e '.[gcp]' 'apache-beam[gcp]==$(FLINK_RUNNER_BEAM)' 'pytest>=8' \
	    'pytest-timeout>=2.3' 'hypothesis>=6.100' 'looptime>=0.9'
	touch $@

prism: $(PRISM_DEV) $(PRISM_LATEST)
job-server: $(JOB_SERVER_JAR)
PORTABLE_ENVS := $(PRISM_DEV) $(PRISM_LATEST) $(JOB_SERVER_JAR) $(FLINK_VENV)/.installed \
    $(FLINK_RUNNER_VENV)/.installed
toolchain: $(PORTABLE_ENVS)

# `make envs` (and so `make test`) builds them beside the other environments;
# each line's suite needs its Prism.
envs: $(PORTABLE_ENVS)
test-dev-rest: $(PRISM_DEV)
test-latest: $(PRISM_LATEST)
bench: $(PRISM_LATEST) $(JOB_SERVER_JAR)

# The FlinkRunner suite: the batch pipeline on embedded Flink and `flink run`
# of the portable jar on a standalone cluster, the streaming path with
# checkpoints, and a task manager killed mid-input, before the first checkpoint and
# after one. It runs after the Beam-latest line, in that part's slot: a fourth
# process beside the three (its JVMs included) slowed the timing-bound flow-control
# and end-of-input tests past their bounds, and the line and this suite together
# still end before the dev line's Flink part.
TEST_PARTS := $(filter-out test-latest,$(TEST_PARTS)) test-latest-portable
.PHONY: test-latest-portable
test-latest-portable: $(LATEST)/.installed $(PORTABLE_ENVS)
	@$(MAKE) --no-print-directory test-latest; latest=$$?; \
	$(MAKE) --no-print-directory test-portable; portable=$$?; \
	test $$latest -eq 0 && test $$portable -eq 0
test-portable: $(PORTABLE_ENVS)
	$(FLINK_RUNNER_VENV)/bin/python -m pytest --basetemp=$(abspath .pytest-tmp)/portable \
	    tests/portable

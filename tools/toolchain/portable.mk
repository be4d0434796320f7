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

# Beam's Kafka transforms on that line (ReadFromKafka/WriteToKafka in `beam-agents run`):
# KafkaIO of FLINK_RUNNER_BEAM and what it needs beyond the job-server jar, for the job
# server's classpath after its jar and for a standalone expansion service's
# (docs/streaming.md, "Beam on Kafka"). Beam's poms leave kafka-clients and jamm to the
# user (`provided`); these two ran here against the Kafka 4.1 broker of kafka.mk.
KAFKAIO_KAFKA_CLIENTS := 3.9.1
KAFKAIO_JAMM          := 0.4.0
KAFKAIO_DIR           := $(TOOLCHAIN)/beam-kafkaio-$(FLINK_RUNNER_BEAM)
KAFKAIO_JOB_SERVER    := $(KAFKAIO_DIR)/flink-job-server.jar

# One line naming a missing tool and how to get it.
need = @command -v $(1) >/dev/null 2>&1 || { echo "toolchain: '$(1)' not found on PATH; $(2)" >&2; exit 1; }
NEED_GO   = $(call need,go,install Go 1.22 or newer (apt-get install golang-go, or a release from the Go project))
NEED_MVN  = $(call need,mvn,install Maven 3.8 or newer (apt-get install maven))
NEED_JAVA = $(call need,java,install a Java 17 runtime (apt-get install openjdk-17-jdk-headless))
NEED_JAR  = $(call need,jar,install a Java 17 JDK (apt-get install openjdk-17-jdk-headless))

.PHONY: toolchain prism job-server kafkaio test-portable

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

# Two resolutions: the job server's dependencies (what its jar holds, shaded) and
# KafkaIO's, with absolute paths into ~/.m2; lib/ gets the jars of KafkaIO's that the
# job server does not hold. Those it holds would come second on the classpath and never
# load, and an older copy of one beside its jar only invites a mismatch.
# KAFKAIO_JOB_SERVER is a jar of a manifest alone: the job server's main class and JVM
# options, and a Class-Path of its jar, then lib/. So `java -jar` of it (or
# --flink_job_server_jar) starts the job server with KafkaIO, and `java -cp` of it
# runs the expansion service on the same classpath. A manifest line holds at most 72
# bytes; a continuation line starts with a space that is dropped, hence two.
$(KAFKAIO_DIR)/.installed: tools/toolchain/beam-kafkaio/pom.xml \
    tools/toolchain/flink-job-server/pom.xml tools/toolchain/portable.mk $(JOB_SERVER_JAR)
	$(NEED_JAVA)
	$(NEED_MVN)
	$(NEED_JAR)
	rm -rf $(KAFKAIO_DIR) && mkdir -p $(KAFKAIO_DIR)/lib
	mvn -B -q -Dstyle.color=never -f tools/toolchain/flink-job-server/pom.xml dependency:list \
	    -DincludeScope=runtime -Dbeam.version=$(FLINK_RUNNER_BEAM) -Dflink.minor=$(FLINK_MINOR) \
	    -Dbuild.dir=$(abspath $(TOOLCHAIN))/build/flink-job-server \
	    -DoutputFile=$(abspath $(KAFKAIO_DIR))/job-server.list
	mvn -B -q -Dstyle.color=never -f tools/toolchain/beam-kafkaio/pom.xml dependency:list \
	    -DincludeScope=runtime -Dbeam.version=$(FLINK_RUNNER_BEAM) \
	    -Dkafka.clients.version=$(KAFKAIO_KAFKA_CLIENTS) -Djamm.version=$(KAFKAIO_JAMM) \
	    -DoutputAbsoluteArtifactFilename=true -DoutputFile=$(abspath $(KAFKAIO_DIR))/kafkaio.list
	awk -F: '{ sub(/^ +/, "") } NR == FNR { if (NF >= 5) held[$$1 ":" $$2] = 1; next } \
	    NF >= 6 && !(($$1 ":" $$2) in held) { print $$NF }' \
	    $(KAFKAIO_DIR)/job-server.list $(KAFKAIO_DIR)/kafkaio.list \
	    | xargs cp -t $(KAFKAIO_DIR)/lib
	test -f $(KAFKAIO_DIR)/lib/beam-sdks-java-io-kafka-$(FLINK_RUNNER_BEAM).jar
	test -f $(KAFKAIO_DIR)/lib/kafka-clients-$(KAFKAIO_KAFKA_CLIENTS).jar
	test -f $(KAFKAIO_DIR)/lib/jamm-$(KAFKAIO_JAMM).jar
	cd $(KAFKAIO_DIR) && jar --extract --file $(abspath $(JOB_SERVER_JAR)) META-INF/MANIFEST.MF
	{ echo "Main-Class: org.apache.beam.runners.flink.FlinkJobServerDriver"; \
	  tr -d '\r' < $(KAFKAIO_DIR)/META-INF/MANIFEST.MF | awk \
	      '/^Add-(Opens|Exports):/ { keep = 1; print; next } /^ / && keep { print; next } { keep = 0 }'; \
	  echo "Class-Path: ../jars/$(notdir $(JOB_SERVER_JAR))"; \
	  ls $(KAFKAIO_DIR)/lib | sed 's|^|  lib/|'; } > $(KAFKAIO_DIR)/MANIFEST.MF
	rm -r $(KAFKAIO_DIR)/META-INF
	jar --create --file $(KAFKAIO_JOB_SERVER) --manifest $(KAFKAIO_DIR)/MANIFEST.MF
	touch $@
	@echo "fetched Beam $(FLINK_RUNNER_BEAM)'s KafkaIO into $(KAFKAIO_DIR)/lib ($$(ls $(KAFKAIO_DIR)/lib | wc -l) jars)"

# The cluster needs only the Java distribution the wheel bundles (bin/, lib/,
# conf/), so its Python dependencies stay out.
$(FLINK_VENV)/.installed: tools/toolchain/portable.mk
	$(NEED_JAVA)
	test -x $(FLINK_VENV)/bin/python || $(PYTHON) -m venv $(FLINK_VENV)
	$(FLINK_VENV)/bin/$(PIP) --no-deps 'apache-flink==$(FLINK_WHEEL)' 'apache-flink-libraries==$(FLINK_WHEEL)'
	touch $@

# It gets the dev line's Kafka client too (its one pin, in pyproject's dev extra): the
# Beam-on-Kafka test produces and reads the topics with it.
CONFLUENT_KAFKA := $(shell sed -n 's/^ *"\(confluent-kafka==[0-9.]*\)",.*/\1/p' pyproject.toml | head -n 1)
$(FLINK_RUNNER_VENV)/.installed: pyproject.toml setup.py tools/toolchain/portable.mk
	test -x $(FLINK_RUNNER_VENV)/bin/python || $(PYTHON) -m venv $(FLINK_RUNNER_VENV)
	$(FLINK_RUNNER_VENV)/bin/$(PIP) -e '.[gcp]' 'apache-beam[gcp]==$(FLINK_RUNNER_BEAM)' 'pytest>=8' \
	    'pytest-timeout>=2.3' 'hypothesis>=6.100' 'looptime>=0.9' '$(CONFLUENT_KAFKA)'
	touch $@

prism: $(PRISM_DEV) $(PRISM_LATEST)
job-server: $(JOB_SERVER_JAR)
kafkaio: $(KAFKAIO_DIR)/.installed
PORTABLE_ENVS := $(PRISM_DEV) $(PRISM_LATEST) $(JOB_SERVER_JAR) $(FLINK_VENV)/.installed \
    $(FLINK_RUNNER_VENV)/.installed $(KAFKAIO_DIR)/.installed
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

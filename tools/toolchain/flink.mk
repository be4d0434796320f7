# The native Flink job's keyed operator (src/beam_agents/flink/java/): PyFlink's
# process-mode operator, with checkpoints that hold every timer the Python
# function set (src/beam_agents/flink/_operator.py says why). Included from the
# Makefile. Compiled with javac against the jars of the PyFlink in the dev venv,
# so it always matches the Flink the job runs on (the apache-flink pin in
# pyproject.toml is its pin), and packed into the package, git-ignored, where
# beam_agents.flink finds it and a wheel built afterwards carries it.
FLINK_OPERATOR_SRC := $(wildcard src/beam_agents/flink/java/*.java)
FLINK_OPERATOR_JAR := src/beam_agents/flink/_jars/beam-agents-flink-operator.jar

.PHONY: flink-operator-jar

# $(call java_jar,WHAT): javac the rule's Java sources (its prerequisites ending in .java)
# against the dev venv's PyFlink (lib/ and opt/) and the jars in JAVA_CLASSPATH, then
# pack the classes into the rule's target; WHAT names what they are when javac is missing.
define java_jar
	@command -v javac >/dev/null || { echo "$(1): javac is not on PATH (a Java 17 JDK: apt-get install openjdk-17-jdk-headless)" >&2; exit 1; }
	rm -rf $@.classes && mkdir -p $@.classes
	pyflink="$$($(VENV)/bin/python -c 'import pathlib, pyflink; print(pathlib.Path(pyflink.__file__).parent)')" && \
	javac --release 17 -nowarn -cp "$$pyflink/lib/*:$$pyflink/opt/*$(JAVA_CLASSPATH:%=:%)" \
	    -d $@.classes $(filter %.java,$^)
	$(VENV)/bin/python -c 'import pathlib, sys, zipfile; root = pathlib.Path(sys.argv[2]); \
	    z = zipfile.ZipFile(sys.argv[1], "w", zipfile.ZIP_DEFLATED); \
	    [z.write(f, f.relative_to(root).as_posix()) for f in sorted(root.rglob("*.class"))]; z.close()' \
	    $@ $@.classes
	rm -rf $@.classes
endef

$(FLINK_OPERATOR_JAR): $(FLINK_OPERATOR_SRC) $(VENV)/.installed tools/toolchain/flink.mk
	$(call java_jar,the Flink job's keyed operator)

flink-operator-jar: $(FLINK_OPERATOR_JAR)

# The Kafka job's record reader (src/beam_agents/flink/java-kafka/): each record's value
# with its traceparent header, which PyFlink's value-only source drops. Compiled against
# the Kafka connector's shaded client, so it is built with the Kafka toolchain.
FLINK_KAFKA_SRC := $(wildcard src/beam_agents/flink/java-kafka/*.java)
FLINK_KAFKA_JAR := src/beam_agents/flink/_jars/beam-agents-flink-kafka.jar

$(FLINK_KAFKA_JAR): JAVA_CLASSPATH := $(KAFKA_CONNECTOR_JAR)
$(FLINK_KAFKA_JAR): $(FLINK_KAFKA_SRC) $(KAFKA_CONNECTOR_JAR) $(VENV)/.installed tools/toolchain/flink.mk
	$(call java_jar,the Kafka job's record reader)

kafka-toolchain: $(FLINK_KAFKA_JAR)

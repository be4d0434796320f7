# Streaming on Flink: a Kafka broker for the tests and the Flink Kafka connector.
# Included from the Makefile. Everything is fetched with mvn (Maven Central; offline
# once ~/.m2 holds it) into the git-ignored .toolchain/, and pinned here, once:
# tests/_kafka.py and the Flink jobs read these three lines.
#
# KAFKA_VERSION: the broker, run from its Maven jars (kafka_2.13 and its runtime
#   dependencies) in KRaft mode, one node; 4.x, as flink-agents runs against.
# FLINK_KAFKA_CONNECTOR: flink-sql-connector-kafka, the connector with its Kafka
#   client shaded in, for the Flink line PyFlink bundles. No release names Flink
#   2.3 (PyFlink's); 5.0.0-2.2, for Flink 2.2, is the newest, and runs on 2.3
#   (tests/flink/test_kafka_job.py).
# KAFKA_LOG4J: the SLF4J binding the broker logs through (its log4j2 config is
#   written by tests/_kafka.py).
KAFKA_VERSION         := 4.1.1
FLINK_KAFKA_CONNECTOR := 5.0.0-2.2
KAFKA_LOG4J           := 2.24.3

TOOLCHAIN     := .toolchain
KAFKA_HOME    := $(TOOLCHAIN)/kafka-$(KAFKA_VERSION)
KAFKA_JARS    := $(TOOLCHAIN)/jars
KAFKA_CONNECTOR_JAR := $(KAFKA_JARS)/flink-sql-connector-kafka-$(FLINK_KAFKA_CONNECTOR).jar
MVN := mvn -B -q -Dstyle.color=never

.PHONY: kafka-toolchain

# One clear line when mvn or java is missing, instead of a wall of shell errors.
define need_mvn
	@command -v mvn >/dev/null || { echo "kafka toolchain: mvn is not on PATH (install Maven: apt-get install maven); it fetches the Kafka broker and the Flink Kafka connector from Maven Central" >&2; exit 1; }
	@command -v java >/dev/null || { echo "kafka toolchain: java is not on PATH (Java 17: apt-get install openjdk-17-jre-headless); the Kafka broker and Flink run on it" >&2; exit 1; }
endef

# The broker: a generated pom naming kafka_2.13 (+ the log binding), whose
# runtime dependencies mvn copies into libs/; `java -cp 'libs/*' kafka.Kafka` runs it.
$(KAFKA_HOME)/.installed: tools/toolchain/kafka.mk
	$(need_mvn)
	rm -rf $(KAFKA_HOME) && mkdir -p $(KAFKA_HOME)
	printf '%s\n' '<project xmlns="http://maven.apache.org/POM/4.0.0">' \
	  '<modelVersion>4.0.0</modelVersion>' \
	  '<groupId>beam-agents.toolchain</groupId><artifactId>kafka-broker</artifactId><version>1</version>' \
	  '<dependencies>' \
	  '<dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$(KAFKA_VERSION)</version></dependency>' \
	  '<dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>$(KAFKA_LOG4J)</version></dependency>' \
	  '</dependencies></project>' > $(KAFKA_HOME)/pom.xml
	$(MVN) -f $(KAFKA_HOME)/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
	    -DoutputDirectory=$(abspath $(KAFKA_HOME))/libs
	test -f $(KAFKA_HOME)/libs/kafka_2.13-$(KAFKA_VERSION).jar
	touch $@

# The Flink connector: one shaded jar, handed to jobs on pipeline.jars.
$(KAFKA_CONNECTOR_JAR): tools/toolchain/kafka.mk
	$(need_mvn)
	mkdir -p $(KAFKA_JARS)
	$(MVN) dependency:copy -Dartifact=org.apache.flink:flink-sql-connector-kafka:$(FLINK_KAFKA_CONNECTOR) \
	    -DoutputDirectory=$(abspath $(KAFKA_JARS))
	test -s $@ && touch $@

kafka-toolchain: $(KAFKA_HOME)/.installed $(KAFKA_CONNECTOR_JAR)

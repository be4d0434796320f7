package beam_agents.flink;

import java.nio.charset.Charset;
import java.nio.charset.StandardCharsets;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.kafka.shaded.org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.flink.kafka.shaded.org.apache.kafka.common.header.Header;
import org.apache.flink.util.Collector;

/**
 * A Kafka record as (its value as text, its {@code traceparent} header or "").
 *
 * <p>PyFlink's Kafka source hands Python the value only; the W3C trace context
 * a producer puts in the record's {@code traceparent} header would be lost, and
 * with it the link from the producer's span to the activation's. The value is
 * decoded in the charset the job names (ISO-8859-1 keeps every byte, so a record
 * that is not UTF-8 still reaches the decoder and becomes a dead letter), and a
 * null value (a tombstone) as the empty line. Compiled against the shaded client
 * of flink-sql-connector-kafka, the connector the job runs with.
 */
public final class TraceparentRecords implements KafkaRecordDeserializationSchema<Tuple2<String, String>> {
    private static final long serialVersionUID = 1L;
    private static final String HEADER = "traceparent";

    private final String charset;

    public TraceparentRecords(String charset) {
        this.charset = charset;
    }

    @Override
    public void deserialize(ConsumerRecord<byte[], byte[]> record, Collector<Tuple2<String, String>> out) {
        byte[] value = record.value();
        Header header = record.headers().lastHeader(HEADER);
        byte[] parent = header == null ? null : header.value();
        out.collect(Tuple2.of(
                value == null ? "" : new String(value, Charset.forName(charset)),
                parent == null ? "" : new String(parent, StandardCharsets.UTF_8)));
    }

    @Override
    public TypeInformation<Tuple2<String, String>> getProducedType() {
        return Types.TUPLE(Types.STRING, Types.STRING);
    }
}

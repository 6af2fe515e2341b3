// RealProducer produces click events with Apache Kafka's own Java client, a
// producer no one here wrote, for the worker's tests. Run as a single-file
// source program against the broker's jars (they hold kafka-clients):
//
//   java -cp "$TESTENV_KAFKA_LIB/*" RealProducer.java BROKERS TOPIC MODE N
//
// Modes:
//   transactions  three transactions of N events each: committed (ids c1-i),
//                 aborted (a-i), committed (c2-i). The aborted one is
//                 flushed before it is aborted: its records are in the log,
//                 followed by the ABORT marker.
//   open          a transaction of N events (open-i) left open on partition
//                 0, then N events outside transactions after it (after-i),
//                 on partition 0 too; prints "OPEN" and waits for a line on
//                 stdin: "commit" commits it, anything else aborts it; then
//                 prints "DONE".
//   codecs        N events (<codec>-i) with each of gzip, snappy, lz4 and
//                 zstd, outside transactions, in batches of up to 256 KiB,
//                 each record with headers.
//
// Events have no occurred_at: their time is the record's. Log lines of the
// client go to stderr; stdout says only OPEN and DONE.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Properties;
import java.util.UUID;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class RealProducer {
    public static void main(String[] args) throws Exception {
        if (args.length != 4) {
            System.err.println("usage: RealProducer BROKERS TOPIC transactions|open|codecs N");
            System.exit(2);
        }
        String brokers = args[0], topic = args[1], mode = args[2];
        int n = Integer.parseInt(args[3]);
        switch (mode) {
            case "transactions" -> transactions(brokers, topic, n);
            case "open" -> open(brokers, topic, n);
            case "codecs" -> codecs(brokers, topic, n);
            default -> {
                System.err.println("unknown mode " + mode);
                System.exit(2);
            }
        }
    }

    static Properties props(String brokers) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        return p;
    }

    static KafkaProducer<byte[], byte[]> transactional(String brokers) {
        Properties p = props(brokers);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "cellttl-test-" + UUID.randomUUID());
        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p);
        producer.initTransactions();
        return producer;
    }

    static ProducerRecord<byte[], byte[]> event(String topic, Integer partition, String id, int i) {
        String user = "u-" + (i % 7);
        String value = "{\"event_id\":\"" + id + "\",\"tenant_id\":\"globex\",\"user_id\":\"" + user + "\",\"page\":\"/java\"}";
        ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(topic, partition, user.getBytes(StandardCharsets.UTF_8),
                value.getBytes(StandardCharsets.UTF_8));
        r.headers().add("source", "java".getBytes(StandardCharsets.UTF_8));
        r.headers().add("seq", Integer.toString(i).getBytes(StandardCharsets.UTF_8));
        return r;
    }

    static void transactions(String brokers, String topic, int n) throws Exception {
        try (KafkaProducer<byte[], byte[]> producer = transactional(brokers)) {
            String[] prefixes = {"c1", "a", "c2"};
            for (String prefix : prefixes) {
                producer.beginTransaction();
                for (int i = 0; i < n; i++) {
                    producer.send(event(topic, null, prefix + "-" + i, i));
                }
                producer.flush(); // in the log before the outcome is decided
                if (prefix.equals("a")) {
                    producer.abortTransaction();
                } else {
                    producer.commitTransaction();
                }
            }
        }
    }

    static void open(String brokers, String topic, int n) throws Exception {
        try (KafkaProducer<byte[], byte[]> producer = transactional(brokers);
             KafkaProducer<byte[], byte[]> plain = new KafkaProducer<>(props(brokers))) {
            producer.beginTransaction();
            for (int i = 0; i < n; i++) {
                producer.send(event(topic, 0, "open-" + i, i));
            }
            producer.flush();
            for (int i = 0; i < n; i++) {
                plain.send(event(topic, 0, "after-" + i, i));
            }
            plain.flush();
            System.out.println("OPEN");
            System.out.flush();
            String line = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
            if ("commit".equals(line)) {
                producer.commitTransaction();
            } else {
                producer.abortTransaction();
            }
            System.out.println("DONE");
            System.out.flush();
        }
    }

    static void codecs(String brokers, String topic, int n) throws Exception {
        for (String codec : new String[] {"gzip", "snappy", "lz4", "zstd"}) {
            Properties p = props(brokers);
            p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
            p.put(ProducerConfig.BATCH_SIZE_CONFIG, Integer.toString(256 << 10));
            p.put(ProducerConfig.LINGER_MS_CONFIG, "50");
            try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
                for (int i = 0; i < n; i++) {
                    producer.send(event(topic, null, codec + "-" + i, i));
                }
                producer.flush();
            }
        }
    }
}

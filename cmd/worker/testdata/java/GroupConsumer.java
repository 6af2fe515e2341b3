// GroupConsumer joins a consumer group with Apache Kafka's own Java
// client, beside the worker's, for the worker's tests. Run as a
// single-file source program against the broker's jars:
//
//   java -cp "$TESTENV_KAFKA_LIB/*" GroupConsumer.java BROKERS TOPIC GROUP PROTOCOL SECONDS
//
// PROTOCOL is the client's group.protocol: classic, or consumer (KIP-848,
// the default of Java clients 4.x). It polls until the client fails, or
// for SECONDS, never commits (what it reads the worker reads again once
// it leaves), then leaves the group. stdout has a line per event:
// "ASSIGNED 0,2" at each assignment, "READ n" at the end,
// "ERROR <class>: <message>" when the client fails.

import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Properties;
import java.util.stream.Collectors;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class GroupConsumer {
    public static void main(String[] args) {
        if (args.length != 5) {
            System.err.println("usage: GroupConsumer BROKERS TOPIC GROUP classic|consumer SECONDS");
            System.exit(2);
        }
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, args[2]);
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, args[3]);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        long end = System.currentTimeMillis() + 1000L * Integer.parseInt(args[4]);
        long read = 0;
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            c.subscribe(List.of(args[1]), new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> parts) {}

                public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                    System.out.println("ASSIGNED " + parts.stream().map(tp -> Integer.toString(tp.partition())).sorted().collect(Collectors.joining(",")));
                    System.out.flush();
                }
            });
            while (System.currentTimeMillis() < end) {
                read += c.poll(Duration.ofMillis(200)).count();
            }
        } catch (Exception e) {
            System.out.println("ERROR " + e.getClass().getSimpleName() + ": " + e.getMessage());
        }
        System.out.println("READ " + read);
    }
}

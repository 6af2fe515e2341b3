// An independent producer for the schema-registry tests: Apicurio's own
// Java serializers (from Maven Central, scripts/registry/pom.xml) and
// Apache Kafka's Java producer write click events framed as Confluent's
// serializers frame them (magic byte 0, a 4-byte content id), so that the
// worker's decoder is checked against code it shares nothing with.
//
//   java -cp "$TESTENV_SERDES_LIB/*" RegistryProducer.java FORMAT BOOTSTRAP TOPIC REGISTRY_V2_URL VERSION COUNT PREFIX MILLIS
//
// FORMAT avro or protobuf. Only avro is framed as Confluent's serializers
// frame it: Apicurio's Protobuf serializer (2.x) writes a length-delimited
// message reference of its own after the id (07 0a 05 "Click" for Click),
// where Confluent's write the message indexes, so the worker dead-letters
// its values undecodable. VERSION 1, or 2 (the schema evolved: a field
// added, with a default); events PREFIX-0.. of tenant acme, users u-0..u-2,
// all keyed acme (one partition: a schema evolution mid-partition),
// at MILLIS (epoch milliseconds).
import java.util.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.avro.Schema;
import org.apache.avro.generic.*;
import com.google.protobuf.*;
import com.google.protobuf.DescriptorProtos.*;

public class RegistryProducer {
    static final String AVRO_V1 = "{\"type\":\"record\",\"name\":\"Click\",\"namespace\":\"cellttl.test\",\"fields\":["
        + "{\"name\":\"event_id\",\"type\":\"string\"},{\"name\":\"tenant_id\",\"type\":\"string\"},"
        + "{\"name\":\"user_id\",\"type\":[\"null\",\"string\"],\"default\":null},"
        + "{\"name\":\"occurred_at\",\"type\":{\"type\":\"long\",\"logicalType\":\"timestamp-millis\"}},"
        + "{\"name\":\"page\",\"type\":\"string\"}";
    static final String AVRO_V2_EXTRA = ",{\"name\":\"referrer\",\"type\":[\"null\",\"string\"],\"default\":null}";

    public static void main(String[] a) throws Exception {
        String format = a[0], bootstrap = a[1], topic = a[2], registry = a[3];
        int version = Integer.parseInt(a[4]), count = Integer.parseInt(a[5]);
        String prefix = a[6];
        long millis = Long.parseLong(a[7]);
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("acks", "all");
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("apicurio.registry.url", registry);
        p.put("apicurio.registry.auto-register", "true");
        p.put("apicurio.registry.as-confluent", "true");
        p.put("apicurio.registry.use-id", "contentId");
        p.put("apicurio.registry.headers.enabled", "false");
        if (format.equals("avro")) {
            p.put("value.serializer", "io.apicurio.registry.serde.avro.AvroKafkaSerializer");
            String text = AVRO_V1 + (version == 2 ? AVRO_V2_EXTRA : "") + "]}";
            Schema schema = new Schema.Parser().parse(text);
            try (Producer<String, Object> pr = new KafkaProducer<>(p)) {
                for (int i = 0; i < count; i++) {
                    GenericRecord r = new GenericData.Record(schema);
                    r.put("event_id", prefix + "-" + i);
                    r.put("tenant_id", "acme");
                    r.put("user_id", "u-" + (i % 3));
                    r.put("occurred_at", millis);
                    r.put("page", "/p/" + i);
                    if (version == 2) r.put("referrer", "https://example.com/");
                    pr.send(new ProducerRecord<>(topic, "acme", r)).get();
                }
            }
        } else {
            p.put("value.serializer", "io.apicurio.registry.serde.protobuf.ProtobufKafkaSerializer");
            Descriptors.Descriptor click = clickDescriptor(version);
            try (Producer<String, Object> pr = new KafkaProducer<>(p)) {
                for (int i = 0; i < count; i++) {
                    Timestamp ts = Timestamp.newBuilder().setSeconds(Math.floorDiv(millis, 1000)).setNanos((int) Math.floorMod(millis, 1000) * 1000000).build();
                    DynamicMessage.Builder b = DynamicMessage.newBuilder(click)
                        .setField(click.findFieldByName("event_id"), prefix + "-" + i)
                        .setField(click.findFieldByName("tenant_id"), "acme")
                        .setField(click.findFieldByName("user_id"), "u-" + (i % 3))
                        .setField(click.findFieldByName("occurred_at"), ts)
                        .setField(click.findFieldByName("page"), "/p/" + i);
                    if (version == 2) b.setField(click.findFieldByName("referrer"), "https://example.com/");
                    pr.send(new ProducerRecord<>(topic, "acme", b.build())).get();
                }
            }
        }
    }

    // clickDescriptor builds message Click in a file of its own, without
    // protoc: event_id 1, tenant_id 2, user_id 3, occurred_at 4 (a
    // google.protobuf.Timestamp), page 5, and in version 2 referrer 6.
    static Descriptors.Descriptor clickDescriptor(int version) throws Exception {
        DescriptorProto.Builder m = DescriptorProto.newBuilder().setName("Click");
        String[] names = {"event_id", "tenant_id", "user_id", "occurred_at", "page", "referrer"};
        for (int i = 0; i < (version == 2 ? 6 : 5); i++) {
            FieldDescriptorProto.Builder f = FieldDescriptorProto.newBuilder().setName(names[i]).setNumber(i + 1)
                .setLabel(FieldDescriptorProto.Label.LABEL_OPTIONAL).setType(FieldDescriptorProto.Type.TYPE_STRING);
            if (names[i].equals("occurred_at")) f.setType(FieldDescriptorProto.Type.TYPE_MESSAGE).setTypeName(".google.protobuf.Timestamp");
            m.addField(f);
        }
        FileDescriptorProto file = FileDescriptorProto.newBuilder().setName("click.proto").setPackage("cellttl.test").setSyntax("proto3")
            .addDependency("google/protobuf/timestamp.proto").addMessageType(m).build();
        return Descriptors.FileDescriptor.buildFrom(file, new Descriptors.FileDescriptor[]{Timestamp.getDescriptor().getFile()}).findMessageTypeByName("Click");
    }
}

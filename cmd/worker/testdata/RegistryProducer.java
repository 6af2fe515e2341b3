// An independent producer for the schema-registry tests: Apache Kafka's
// Java producer writes click events framed as Confluent's serializers
// frame them (magic byte 0, a 4-byte big-endian schema id, for Protobuf
// the message indexes), by code the worker's decoder shares nothing with:
//
//   - avro: Apicurio's own Avro serializer registers the schema and writes.
//   - json-schema: the schema registered through the registry's
//     Confluent-compatible API (ccompat/v7), as a Confluent producer would;
//     Apicurio's JSON Schema serializer finds it, validates each event
//     against it and writes.
//   - protobuf: Apicurio's Protobuf serializer does not write Confluent's
//     message indexes (it writes a length-delimited message name), so the
//     value is framed by hand: the .proto registered through ccompat/v7,
//     parsed by Apicurio's schema parser (Square's Wire) into Google's
//     protobuf-java descriptors, the message built as a DynamicMessage and
//     serialized by protobuf-java, the indexes written as Confluent's
//     MessageIndexes does (Kafka's zigzag varints: a count, then each
//     index; the first message, [0], as a single 0; and for the last event
//     of version 1 in the long form, a count of 1 and index 0, as other
//     writers, Apicurio's 3.x serializers among them, do).
//   - protobuf-apicurio: Apicurio's Protobuf serializer as it is, writing
//     its own reference to the message where the indexes belong: the
//     value a team using it would send.
//
//   java -cp "$TESTENV_SERDES_LIB/*" RegistryProducer.java FORMAT BOOTSTRAP TOPIC REGISTRY VERSION COUNT PREFIX NANOS
//
// REGISTRY is the registry's API root (http://host:port/apis). VERSION 1,
// or 2: the schema evolved (Avro and JSON Schema: a field added, and JSON
// Schema's time an epoch-milliseconds number instead of an RFC 3339
// string; Protobuf: a message Session declared before Click, which is then
// message [1], and a field of that type added to Click). Events PREFIX-0..,
// of tenants acme (even) and globex (odd), users u-0..u-2, all keyed acme
// (one partition: a schema evolution mid-partition), at NANOS (epoch
// nanoseconds). Avro and JSON Schema carry the contract's tenant_id, and
// the user nested (user.id); Protobuf nests both in context (context.tenant,
// context.user).
import java.io.*;
import java.net.URI;
import java.net.http.*;
import java.nio.ByteBuffer;
import java.time.Instant;
import java.util.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.utils.ByteUtils;
import org.apache.avro.Schema;
import org.apache.avro.generic.*;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.google.protobuf.*;
import io.apicurio.registry.utils.protobuf.schema.FileDescriptorUtils;

public class RegistryProducer {
    static final String AVRO_V1 = "{\"type\":\"record\",\"name\":\"Click\",\"namespace\":\"cellttl.test\",\"fields\":["
        + "{\"name\":\"event_id\",\"type\":\"string\"},{\"name\":\"tenant_id\",\"type\":\"string\"},"
        + "{\"name\":\"user\",\"type\":[\"null\",{\"type\":\"record\",\"name\":\"User\",\"fields\":[{\"name\":\"id\",\"type\":\"string\"}]}],\"default\":null},"
        + "{\"name\":\"occurred_at\",\"type\":{\"type\":\"long\",\"logicalType\":\"timestamp-millis\"}},"
        + "{\"name\":\"page\",\"type\":\"string\"}";
    static final String AVRO_V2_EXTRA = ",{\"name\":\"referrer\",\"type\":[\"null\",\"string\"],\"default\":null}";

    static final String JSON_V1 = "{\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"title\":\"Click\",\"type\":\"object\","
        + "\"properties\":{\"event_id\":{\"type\":\"string\"},\"tenant_id\":{\"type\":\"string\"},"
        + "\"user\":{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\"}},\"required\":[\"id\"]},"
        + "\"occurred_at\":{\"type\":\"string\",\"format\":\"date-time\"},\"page\":{\"type\":\"string\"}},"
        + "\"required\":[\"event_id\",\"tenant_id\",\"occurred_at\"]}";
    static final String JSON_V2 = "{\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"title\":\"Click\",\"type\":\"object\","
        + "\"properties\":{\"event_id\":{\"type\":\"string\"},\"tenant_id\":{\"type\":\"string\"},"
        + "\"user\":{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\"}},\"required\":[\"id\"]},"
        + "\"occurred_at\":{\"type\":\"integer\",\"description\":\"epoch milliseconds\"},\"page\":{\"type\":\"string\"},"
        + "\"referrer\":{\"type\":\"string\"}},"
        + "\"required\":[\"event_id\",\"tenant_id\",\"occurred_at\"]}";

    static final String PROTO_HEAD = "syntax = \"proto3\";\npackage cellttl.test;\n\nimport \"google/protobuf/timestamp.proto\";\n\n";
    static final String PROTO_CLICK = "message Click {\n  string event_id = 1;\n  Context context = 2;\n"
        + "  google.protobuf.Timestamp occurred_at = 3;\n  string page = 4;\n%s\n"
        + "  message Context {\n    string tenant = 1;\n    string user = 2;\n  }\n}\n";
    static final String PROTO_V1 = PROTO_HEAD + String.format(PROTO_CLICK, "");
    static final String PROTO_V2 = PROTO_HEAD + "message Session {\n  string id = 1;\n}\n\n" + String.format(PROTO_CLICK, "  Session session = 5;\n");

    static final ObjectMapper JSON = new ObjectMapper();

    public static void main(String[] a) throws Exception {
        String format = a[0], bootstrap = a[1], topic = a[2], registry = a[3];
        int version = Integer.parseInt(a[4]), count = Integer.parseInt(a[5]);
        String prefix = a[6];
        long nanos = Long.parseLong(a[7]);
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("acks", "all");
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("apicurio.registry.url", registry + "/registry/v2");
        p.put("apicurio.registry.as-confluent", "true");
        p.put("apicurio.registry.use-id", "contentId");
        p.put("apicurio.registry.headers.enabled", "false");
        switch (format) {
            case "avro" -> avro(p, topic, version, count, prefix, nanos);
            case "json-schema" -> jsonSchema(p, topic, registry + "/ccompat/v7", version, count, prefix, nanos);
            case "protobuf" -> protobuf(p, topic, registry + "/ccompat/v7", version, count, prefix, nanos);
            case "protobuf-apicurio" -> protobufApicurio(p, topic, count, prefix, nanos);
            default -> throw new IllegalArgumentException("format " + format + ": want avro, json-schema, protobuf or protobuf-apicurio");
        }
    }

    static String tenant(int i) { return i % 2 == 0 ? "acme" : "globex"; }

    static String user(int i) { return "u-" + (i % 3); }

    static void avro(Properties p, String topic, int version, int count, String prefix, long nanos) throws Exception {
        p.put("value.serializer", "io.apicurio.registry.serde.avro.AvroKafkaSerializer");
        p.put("apicurio.registry.auto-register", "true");
        Schema schema = new Schema.Parser().parse(AVRO_V1 + (version == 2 ? AVRO_V2_EXTRA : "") + "]}");
        Schema userSchema = schema.getField("user").schema().getTypes().get(1);
        try (Producer<String, Object> pr = new KafkaProducer<>(p)) {
            for (int i = 0; i < count; i++) {
                GenericRecord u = new GenericData.Record(userSchema);
                u.put("id", user(i));
                GenericRecord r = new GenericData.Record(schema);
                r.put("event_id", prefix + "-" + i);
                r.put("tenant_id", tenant(i));
                r.put("user", u);
                r.put("occurred_at", Math.floorDiv(nanos, 1_000_000L));
                r.put("page", "/p/" + i);
                if (version == 2) r.put("referrer", "https://example.com/");
                pr.send(new ProducerRecord<>(topic, "acme", r)).get();
            }
        }
    }

    static void jsonSchema(Properties p, String topic, String ccompat, int version, int count, String prefix, long nanos) throws Exception {
        register(ccompat, topic + "-value", "JSON", version == 1 ? JSON_V1 : JSON_V2);
        p.put("value.serializer", "io.apicurio.registry.serde.jsonschema.JsonSchemaKafkaSerializer");
        p.put("apicurio.registry.auto-register", "false");
        p.put("apicurio.registry.artifact.version", String.valueOf(version));
        p.put("apicurio.registry.serde.validation-enabled", "true");
        Instant at = Instant.ofEpochSecond(0, nanos);
        try (Producer<String, Object> pr = new KafkaProducer<>(p)) {
            for (int i = 0; i < count; i++) {
                Map<String, Object> v = new LinkedHashMap<>();
                v.put("event_id", prefix + "-" + i);
                v.put("tenant_id", tenant(i));
                v.put("user", Map.of("id", user(i)));
                v.put("occurred_at", version == 1 ? at.toString() : (Object) at.toEpochMilli());
                v.put("page", "/p/" + i);
                if (version == 2) v.put("referrer", "https://example.com/");
                pr.send(new ProducerRecord<>(topic, "acme", v)).get();
            }
        }
    }

    static void protobuf(Properties p, String topic, String ccompat, int version, int count, String prefix, long nanos) throws Exception {
        String text = version == 1 ? PROTO_V1 : PROTO_V2;
        int id = register(ccompat, topic + "-value", "PROTOBUF", text);
        Descriptors.Descriptor click = FileDescriptorUtils.protoFileToFileDescriptor(text, "click.proto", Optional.of("cellttl.test"))
            .findMessageTypeByName("Click");
        if (click.getIndex() != version - 1) {
            throw new IllegalStateException("Click is message " + click.getIndex() + " of version " + version);
        }
        p.put("value.serializer", ByteArraySerializer.class.getName());
        Timestamp ts = timestamp(nanos);
        try (Producer<String, byte[]> pr = new KafkaProducer<>(p)) {
            for (int i = 0; i < count; i++) {
                DynamicMessage.Builder b = click(click, prefix, i, ts);
                if (version == 2) {
                    Descriptors.Descriptor session = click.getFile().findMessageTypeByName("Session");
                    b.setField(click.findFieldByName("session"), DynamicMessage.newBuilder(session)
                        .setField(session.findFieldByName("id"), "s-" + i).build());
                }
                ByteArrayOutputStream v = new ByteArrayOutputStream();
                v.write(0);
                v.write(ByteBuffer.allocate(4).putInt(id).array());
                v.write(messageIndexes(version == 2 || i < count - 1, click.getIndex()));
                b.build().writeTo(v);
                pr.send(new ProducerRecord<>(topic, "acme", v.toByteArray())).get();
            }
        }
    }

    static DynamicMessage.Builder click(Descriptors.Descriptor click, String prefix, int i, Timestamp ts) {
        Descriptors.Descriptor context = click.findNestedTypeByName("Context");
        DynamicMessage ctx = DynamicMessage.newBuilder(context)
            .setField(context.findFieldByName("tenant"), tenant(i))
            .setField(context.findFieldByName("user"), user(i)).build();
        return DynamicMessage.newBuilder(click)
            .setField(click.findFieldByName("event_id"), prefix + "-" + i)
            .setField(click.findFieldByName("context"), ctx)
            .setField(click.findFieldByName("occurred_at"), ts)
            .setField(click.findFieldByName("page"), "/p/" + i);
    }

    static void protobufApicurio(Properties p, String topic, int count, String prefix, long nanos) throws Exception {
        p.put("value.serializer", "io.apicurio.registry.serde.protobuf.ProtobufKafkaSerializer");
        p.put("apicurio.registry.auto-register", "true");
        Descriptors.Descriptor click = FileDescriptorUtils.protoFileToFileDescriptor(PROTO_V1, "click.proto", Optional.of("cellttl.test"))
            .findMessageTypeByName("Click");
        try (Producer<String, Object> pr = new KafkaProducer<>(p)) {
            for (int i = 0; i < count; i++) {
                pr.send(new ProducerRecord<>(topic, "acme", click(click, prefix, i, timestamp(nanos)).build())).get();
            }
        }
    }

    static Timestamp timestamp(long nanos) {
        return Timestamp.newBuilder().setSeconds(Math.floorDiv(nanos, 1_000_000_000L)).setNanos((int) Math.floorMod(nanos, 1_000_000_000L)).build();
    }

    // messageIndexes is Confluent's MessageIndexes.toByteArray: the path
    // of the message in its file as zigzag varints, a count first; the
    // first message, [0], as a single 0 when optimized (Confluent always
    // does), else as a count of 1 and index 0.
    static byte[] messageIndexes(boolean optimized, int... path) throws IOException {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        DataOutputStream d = new DataOutputStream(out);
        if (optimized && path.length == 1 && path[0] == 0) {
            ByteUtils.writeVarint(0, d);
        } else {
            ByteUtils.writeVarint(path.length, d);
            for (int i : path) ByteUtils.writeVarint(i, d);
        }
        return out.toByteArray();
    }

    // register registers a schema under subject through the registry's
    // Confluent-compatible API and returns its id.
    static int register(String ccompat, String subject, String type, String text) throws Exception {
        String body = JSON.writeValueAsString(Map.of("schemaType", type, "schema", text));
        HttpResponse<String> r = HttpClient.newHttpClient().send(HttpRequest.newBuilder(URI.create(ccompat + "/subjects/" + subject + "/versions"))
            .header("Content-Type", "application/vnd.schemaregistry.v1+json")
            .POST(HttpRequest.BodyPublishers.ofString(body)).build(), HttpResponse.BodyHandlers.ofString());
        if (r.statusCode() != 200) {
            throw new IOException("register " + subject + ": " + r.statusCode() + " " + r.body());
        }
        return JSON.readTree(r.body()).get("id").asInt();
    }
}

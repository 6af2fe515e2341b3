"""Produce click events with Confluent's own Python client and serializers,
default settings: the schema auto-registered under the topic's subject
(TopicNameStrategy), as a new user would.

usage: confluent_producer.py FORMAT BROKERS TOPIC REGISTRY_URL COUNT PREFIX AT_NS

Events PREFIX-0.., of tenants acme (even) and globex (odd), users u-0..u-2,
all at AT_NS (nanoseconds since the epoch), each in the contract's fields
(event_id, tenant_id, user_id, occurred_at). FORMAT is one of:

  avro           user_id a union with null, occurred_at timestamp-millis
  avro-refs      the same, its context a named record of another subject,
                 registered first and referenced
  json           JSON Schema; occurred_at RFC 3339 with microseconds and
                 +00:00, as Python's isoformat writes it
  protobuf       Click the file's second message (index [1]), occurred_at a
                 google.protobuf.Timestamp finer than a millisecond
  protobuf-refs  the same, Click's context a message of another file the
                 serializer registers under a subject of its own
  protobuf-nested  Click nested in the file's second message, Envelope
                 (index [1, 0])
"""
import datetime
import faulthandler
import sys

from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.serialization import MessageField, SerializationContext

AVRO_CONTEXT = """{"type":"record","name":"Context","namespace":"cellttl.test",
 "fields":[{"name":"session","type":"string"}]}"""


def avro_click(context):
    extra = ',{"name":"context","type":"cellttl.test.Context"}' if context else ""
    return """{"type":"record","name":"Click","namespace":"cellttl.test","fields":[
 {"name":"event_id","type":"string"},{"name":"tenant_id","type":"string"},
 {"name":"user_id","type":["null","string"],"default":null},
 {"name":"occurred_at","type":{"type":"long","logicalType":"timestamp-millis"}}""" + extra + "]}"


JSON_CLICK = """{"$schema":"http://json-schema.org/draft-07/schema#","title":"Click","type":"object",
 "properties":{"event_id":{"type":"string"},"tenant_id":{"type":"string"},"user_id":{"type":["string","null"]},
 "occurred_at":{"type":"string","format":"date-time"}},"required":["event_id","tenant_id","occurred_at"]}"""


def proto_classes(refs, nested=False):
    """Click's class, built from FileDescriptorProtos as protoc would
    generate them (the serializer registers each file's serialized form):
    with refs, Click's context is a message of another file."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2
    fdp = descriptor_pb2.FieldDescriptorProto
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    deps = ["google/protobuf/timestamp.proto"]
    if refs:
        ctx = descriptor_pb2.FileDescriptorProto(name="cellttl/context.proto", package="cellttl.test", syntax="proto3")
        ctx.message_type.add(name="Context").field.add(name="session", number=1, type=fdp.TYPE_STRING, label=fdp.LABEL_OPTIONAL)
        pool.AddSerializedFile(ctx.SerializeToString())
        deps.append("cellttl/context.proto")
    f = descriptor_pb2.FileDescriptorProto(name="cellttl/click.proto", package="cellttl.test", syntax="proto3", dependency=deps)
    f.message_type.add(name="Other").field.add(name="x", number=1, type=fdp.TYPE_STRING, label=fdp.LABEL_OPTIONAL)
    if nested:
        envelope = f.message_type.add(name="Envelope")
        envelope.field.add(name="y", number=1, type=fdp.TYPE_STRING, label=fdp.LABEL_OPTIONAL)
        click = envelope.nested_type.add(name="Click")
    else:
        click = f.message_type.add(name="Click")
    for number, name in enumerate(["event_id", "tenant_id", "user_id"], start=1):
        click.field.add(name=name, number=number, type=fdp.TYPE_STRING, label=fdp.LABEL_OPTIONAL)
    click.field.add(name="occurred_at", number=4, type=fdp.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp", label=fdp.LABEL_OPTIONAL)
    if refs:
        click.field.add(name="context", number=5, type=fdp.TYPE_MESSAGE, type_name=".cellttl.test.Context", label=fdp.LABEL_OPTIONAL)
    pool.AddSerializedFile(f.SerializeToString())
    name = "cellttl.test.Envelope.Click" if nested else "cellttl.test.Click"
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


def serializer(fmt, registry, topic):
    """The serializer of fmt, and how it makes a value of event i."""
    if fmt in ("avro", "avro-refs"):
        from confluent_kafka.schema_registry.avro import AvroSerializer
        refs = fmt == "avro-refs"
        schema = avro_click(refs)
        if refs:
            subject = topic + "-context"
            registry.register_schema(subject, Schema(AVRO_CONTEXT, "AVRO"))
            schema = Schema(schema, "AVRO", [SchemaReference("cellttl.test.Context", subject, 1)])

        def value(event_id, tenant, user, at):
            v = {"event_id": event_id, "tenant_id": tenant, "user_id": user, "occurred_at": at}
            if refs:
                v["context"] = {"session": "s-" + event_id}
            return v
        return AvroSerializer(registry, schema), value
    if fmt == "json":
        from confluent_kafka.schema_registry.json_schema import JSONSerializer

        def value(event_id, tenant, user, at):
            return {"event_id": event_id, "tenant_id": tenant, "user_id": user, "occurred_at": at.isoformat()}
        return JSONSerializer(JSON_CLICK, registry), value
    if fmt in ("protobuf", "protobuf-refs", "protobuf-nested"):
        from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
        refs = fmt == "protobuf-refs"
        Click = proto_classes(refs, nested=fmt == "protobuf-nested")

        def value(event_id, tenant, user, at):
            msg = Click(event_id=event_id, tenant_id=tenant, user_id=user)
            msg.occurred_at.seconds, msg.occurred_at.nanos = divmod(at_ns, 10**9)
            if refs:
                msg.context.session = "s-" + event_id
            return msg
        return ProtobufSerializer(Click, registry), value
    raise SystemExit(f"unknown format {fmt}")


def main():
    global at_ns
    fmt, brokers, topic, url, count, prefix, at_ns = sys.argv[1:8]
    count, at_ns = int(count), int(at_ns)
    # Python's datetime holds microseconds: the nanoseconds below are the
    # Timestamp's alone.
    at = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(microseconds=at_ns // 1000)
    # Should anything still hang, the stacks say where, before the test's
    # deadline (3 minutes) kills the process with nothing printed.
    faulthandler.dump_traceback_later(150, exit=True)
    # The client's requests have no timeout by default (httpx, timeout
    # None): one request the registry never answers hung the producer
    # until the test killed it. With one, the client retries it.
    registry = SchemaRegistryClient({"url": url, "timeout": 20})
    serialize, value = serializer(fmt, registry, topic)
    producer = Producer({"bootstrap.servers": brokers})
    for i in range(count):
        v = value(f"{prefix}-{i}", "acme" if i % 2 == 0 else "globex", f"u-{i % 3}", at)
        producer.produce(topic, key=b"acme", value=serialize(v, SerializationContext(topic, MessageField.VALUE)))
    if producer.flush(30) != 0:
        raise SystemExit("not every event was delivered within 30s")


if __name__ == "__main__":
    main()

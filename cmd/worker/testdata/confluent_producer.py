"""Produce click events with Confluent's own Python client and serializers,
default settings: the schema auto-registered under the topic's subject
(TopicNameStrategy), as a new user would.

usage: confluent_producer.py FORMAT BROKERS TOPIC REGISTRY_URL COUNT PREFIX AT_NS

FORMAT is protobuf. Events PREFIX-0.., of tenants acme (even) and globex
(odd), users u-0..u-2, all at AT_NS (nanoseconds since the epoch: the
Timestamp keeps what is finer than a millisecond). Protobuf: Click is the
file's second message (index [1]), after Other, and its time a
google.protobuf.Timestamp.
"""
import sys

from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2


def click_class():
    """Click's class, built from a FileDescriptorProto as protoc would
    generate it (the serializer registers the file's serialized form)."""
    f = descriptor_pb2.FileDescriptorProto(name="cellttl/click.proto", package="cellttl.test", syntax="proto3",
                                           dependency=["google/protobuf/timestamp.proto"])
    other = f.message_type.add(name="Other")
    other.field.add(name="x", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                    label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    click = f.message_type.add(name="Click")
    for number, name in enumerate(["event_id", "tenant_id", "user_id"], start=1):
        click.field.add(name=name, number=number, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                        label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    click.field.add(name="occurred_at", number=4, type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
                    type_name=".google.protobuf.Timestamp", label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.AddSerializedFile(f.SerializeToString())
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("cellttl.test.Click"))


def main():
    fmt, brokers, topic, url, count, prefix, at_ns = sys.argv[1:8]
    count, at_ns = int(count), int(at_ns)
    registry = SchemaRegistryClient({"url": url})
    if fmt != "protobuf":
        raise SystemExit(f"unknown format {fmt}")
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    Click = click_class()
    serialize = ProtobufSerializer(Click, registry)
    producer = Producer({"bootstrap.servers": brokers})
    for i in range(count):
        msg = Click(event_id=f"{prefix}-{i}", tenant_id="acme" if i % 2 == 0 else "globex", user_id=f"u-{i % 3}")
        msg.occurred_at.seconds, msg.occurred_at.nanos = divmod(at_ns, 10**9)
        value = serialize(msg, SerializationContext(topic, MessageField.VALUE))
        producer.produce(topic, key=b"acme", value=value)
    if producer.flush(30) != 0:
        raise SystemExit("not every event was delivered within 30s")


if __name__ == "__main__":
    main()

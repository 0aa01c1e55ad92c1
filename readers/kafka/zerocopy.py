"""Fewer copies of each fetched byte on kafka-python 3's IO thread.

kafka-python 3 takes a fetch response's bytes through several copies before the reader sees
them: each chunk read from the socket is sliced (a copy) into the frame's buffer, the frame is
read out whole (a copy) to decode the response, and each partition's records field is sliced
out of it (a copy). At one Criteo line per message that is ~300 MB per million lines, each
copy ~0.05 CPU-s on the IO thread the trainer shares two cores with. Patched here:

* ``KafkaConnection.data_received`` hands the protocol parser a memoryview of the chunk, so its
  slices into the frame buffer are views, not copies (the parser copies each slice into the
  frame synchronously and keeps none);
* ``FetchResponse.decode`` decodes from a view of the frame instead of a copy of it;
* the ``records`` field of ``FetchResponse`` is decoded as a view into the frame (the other
  fields, and every other response, decode as before). ``MemoryRecords`` and the fast path
  read memoryviews already; the view keeps the frame's buffer alive until its records are
  taken.

Only fetch responses change (SASL and proxy exchanges keep getting bytes). Applied by
``fastpath.patch_socket_reads`` at the kafka-python versions it is tested with, and only if a
fetch response built and decoded here gives back the same records; otherwise every patch is
undone and one log line says why.
"""
from __future__ import annotations

import logging
import types

log = logging.getLogger("streamtrain.kafka")


def _records_field(struct):
    """The ``records`` SimpleField inside a response's schema (``responses.partitions.records``)."""
    from kafka.protocol.schemas.fields.simple import SimpleField

    stack = [struct]
    while stack:
        field = stack.pop()
        if isinstance(field, SimpleField) and field._type_str == "records":
            return field
        fields = getattr(field, "fields", None)
        if isinstance(fields, dict):
            stack.extend(fields.values())
    raise LookupError("no records field in the FetchResponse schema")


def _emit_view_decode(self, ctx, var_name, indent, version=None, compact=False, tagged=False):
    """``Bytes.emit_decode_from`` of kafka-python 3.0, the value left a view of ``data``."""
    ln = ctx.next_var("ln")
    if compact:
        from kafka.protocol.schemas.fields.codecs import UnsignedVarInt32
        UnsignedVarInt32.emit_decode_from(ctx, ln, indent)
        ctx.emit(indent, "%s -= 1" % ln)
    else:
        ctx.emit(indent, '%s = unpack_from(">i", data, pos)[0]' % ln)
        ctx.emit(indent, "pos += 4")
    ctx.emit(indent, "if %s < 0:" % ln)
    ctx.emit(indent, "    %s = None" % var_name)
    ctx.emit(indent, "else:")
    ctx.emit(indent, "    %s = data[pos:pos+%s]" % (var_name, ln))
    ctx.emit(indent, "    if len(%s) != %s: raise ValueError('Buffer underrun decoding records')" % (var_name, ln))
    ctx.emit(indent, "    pos += %s" % ln)


def patched(response_class) -> bool:
    """The patches are in place on ``response_class`` (``FetchResponse``)."""
    decode = response_class.__dict__.get("decode")
    return getattr(getattr(decode, "__func__", decode), "_streamtrain", False)


def patch() -> bool:
    """Apply the three patches; True when in place (checked on a sample), else all undone."""
    from kafka.net.connection import KafkaConnection
    from kafka.protocol.consumer import FetchResponse

    if patched(FetchResponse):
        return True
    undo = _apply(KafkaConnection, FetchResponse)
    try:
        problem = _check(FetchResponse)
    except Exception as err:                # the library's internals moved
        problem = f"{type(err).__name__}: {err}"
    if problem:
        undo()
        log.info("kafka fetch responses copied as the library does (%s)", problem)
        return False
    return True


def _apply(connection_class, response_class):
    """Patch; returns the function that undoes it."""
    from kafka.protocol.frame import KafkaBytes

    struct = response_class._struct
    field = _records_field(struct)
    received = connection_class.data_received
    decode = response_class.__dict__.get("decode")
    emit = field.__dict__.get("emit_decode_from")
    base_decode = response_class.decode.__func__

    def data_received(self, data):
        return received(self, memoryview(data) if isinstance(data, bytes) else data)

    def decode_view(cls, data, version=None, header=False, framed=False):
        if isinstance(data, KafkaBytes):            # the frame: a view from its position, no copy
            start = data.tell()
            data.seek(len(data))
            data = memoryview(data)[start:]
        return base_decode(cls, data, version=version, header=header, framed=framed)

    data_received._streamtrain = decode_view._streamtrain = True
    connection_class.data_received = data_received
    response_class.decode = classmethod(decode_view)
    field.emit_decode_from = types.MethodType(_emit_view_decode, field)
    compiled = dict(struct._compiled_encoders)
    struct._compiled_encoders.clear()                # (decoders compiled before: built again)

    def undo():
        connection_class.data_received = received
        if decode is None:
            del response_class.decode
        else:
            response_class.decode = decode
        if emit is None:
            del field.emit_decode_from
        else:
            field.emit_decode_from = emit
        struct._compiled_encoders.clear()
        struct._compiled_encoders.update(compiled)
    return undo


def _check(response_class) -> str | None:
    """A fetch response encoded by the library decodes, through the patches, to the same
    fields with the records a view: None, or what differs."""
    from kafka.protocol.frame import KafkaBytes

    records = b"\x00\x01records\xff" * 3
    for version in (4, 12):
        topic = response_class.FetchableTopicResponse
        parts = [topic.PartitionData(partition_index=i, error_code=0, high_watermark=hw, last_stable_offset=hw,
                                     log_start_offset=0, aborted_transactions=None,
                                     preferred_read_replica=-1, records=recs)
                 for i, hw, recs in ((3, 9, records), (4, 0, None))]
        msg = response_class[version](throttle_time_ms=0, error_code=0, session_id=0,
                                      responses=[topic(topic="t", partitions=parts)])
        raw = msg.encode(version=version)
        frame = KafkaBytes(len(raw))
        frame.write(raw)
        frame.seek(0)
        got = response_class[version].decode(frame)
        parts = got.responses[0].partitions
        if not (isinstance(parts[0].records, memoryview) and bytes(parts[0].records) == records
                and parts[1].records is None and parts[0].high_watermark == 9
                and parts[0].partition_index == 3 and got.responses[0].topic == "t"
                and frame.tell() == len(raw)):
            return f"a sample FetchResponse v{version} decoded differently"
    return None

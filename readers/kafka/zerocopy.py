"""Fewer calls and copies for each fetched byte on kafka-python 3's IO thread.

kafka-python 3 reads its sockets 4 KiB per ``recv`` (a 16 MiB fetch response is ~4000 calls,
each a bytes object and a GIL hand-off), joins the chunks (a copy), slices each into the
frame's buffer (a copy), reads the frame out whole (a copy) to decode the response, and slices
each partition's records field out of it (a copy). At one Criteo line per message that is
~300 MB per million lines, each copy ~0.05 CPU-s on the IO thread the trainer shares two cores
with. ``patch_socket_reads`` (at start-up, ``streamtrain.startup.for_job``) patches:

* ``KafkaTCPTransport._sock_recv``: a Kafka connection's socket is read with ``recv_into`` into
  a reusable 1 MiB buffer per connection (until the socket would block or the buffer is full),
  handed to the connection as a view (it copies what it reads into the frame before the next
  read); other protocols (a proxy's handshake) get bytes read ``RECV_BYTES`` per call, joined;
* ``KafkaBytes.read`` copies once, not twice (a response's fields);
* ``KafkaConnection.data_received`` hands the protocol parser a memoryview of the chunk, so its
  slices into the frame buffer are views, not copies (the parser copies each slice into the
  frame synchronously and keeps none);
* ``FetchResponse.decode`` decodes from a view of the frame instead of a copy of it;
* the ``records`` field of ``FetchResponse`` is decoded as a view into the frame (the other
  fields, and every other response, decode as before). ``MemoryRecords`` and the fast path
  read memoryviews already; the view keeps the frame's buffer alive until its records are
  taken.

Only fetch responses change (SASL and proxy exchanges keep getting bytes). Everything applies
to every kafka-python connection of the process (the bytes delivered are the same), only at
the kafka-python versions of ``SOCKET_READS_TESTED``; the fetch-response patches only if a fetch
response built and decoded here gives back the same records (else they are undone). Whatever
is not applied is said in one log line.
"""
from __future__ import annotations

import logging
import types

log = logging.getLogger("streamtrain.kafka")

SOCKET_READS_TESTED = ((3, 0), (3, 0))   # kafka-python major.minor (2.x has no kafka.net)
RECV_BYTES = 1 << 18                     # per recv call when reading bytes (not a Kafka connection)
SCRATCH_BYTES = 1 << 20                  # a Kafka connection's reusable read buffer
DIRECT_BYTES = 1 << 16                   # a frame lacking more than this is read into directly


def patch_socket_reads() -> bool:
    """Apply the patches of this module (at start-up, never by an import); True when the socket
    reads are patched. Off (one log line) at untested kafka-python versions or if its
    internals moved."""
    try:
        import kafka
        version = tuple(int(part) for part in kafka.__version__.split(".")[:2])
        if not SOCKET_READS_TESTED[0] <= version <= SOCKET_READS_TESTED[1]:
            log.info("kafka-python %s: socket reads left at the library's size per call (the larger "
                     "reads are tested with kafka-python %d.%d to %d.%d)", kafka.__version__,
                     *SOCKET_READS_TESTED[0], *SOCKET_READS_TESTED[1])
            return False
        _patch_socket_reads()
        _patch_frame_reads()
        patch()                          # fetch responses: views of the frame, not copies
        return True
    except Exception as err:         # the library's internals moved: its own reads, one line
        log.warning("kafka socket reads left at the library's size per call (%s: %s)", type(err).__name__, err)
        return False


def _recv(transport, read, tlog, errors):
    """One socket read, ``read()``, as the library's ``_sock_recv`` treats it: (what it returned,
    None); (None, None) when the socket would block; (None, error) when it closed or failed."""
    try:
        got = read()
    except (BlockingIOError, InterruptedError):
        return None, None
    except BaseException as e:
        tlog.exception('%s: Error receiving network data closing socket', transport)
        return None, errors.KafkaConnectionError(e)
    if not got:
        tlog.error('%s: socket disconnected', transport)
        return None, errors.KafkaConnectionError('socket disconnected')
    return got, None


def _read_bytes(transport, tlog, errors):
    """The library's ``_sock_recv``, ``RECV_BYTES`` per call: (bytes, error or None)."""
    recvd = []
    while True:
        data, err = _recv(transport, lambda: transport._sock.recv(RECV_BYTES), tlog, errors)
        if data is None:
            break
        recvd.append(data)
    return (recvd[0] if len(recvd) == 1 else b''.join(recvd)), err


def _read_into(transport, view, tlog, errors):
    """``_read_bytes`` into ``view`` (until the socket would block or it is full): (a view of
    what was read, error or None)."""
    filled, err = 0, None
    while filled < len(view):
        n, err = _recv(transport, lambda at=filled: transport._sock.recv_into(view[at:]), tlog, errors)
        if n is None:
            break
        filled += n
    return view[:filled], err


def _frame_left(protocol):
    """(the frame the connection's parser is filling, how many bytes it lacks), or (None, 0)."""
    parser = getattr(protocol, "parser", None)
    frame = getattr(parser, "_rbuffer", None) if getattr(parser, "_receiving", False) else None
    return (frame, len(frame) - frame.tell()) if frame is not None else (None, 0)


def _patch_socket_reads() -> None:
    from kafka import errors
    from kafka.net import transport
    from kafka.net.connection import KafkaConnection

    if getattr(transport.KafkaTCPTransport._sock_recv, "_streamtrain", False):
        return
    tlog = logging.getLogger("kafka.net.transport")

    def _sock_recv(self):
        if not isinstance(self._protocol, KafkaConnection):
            return _read_bytes(self, tlog, errors)
        frame, left = _frame_left(self._protocol)
        if left > DIRECT_BYTES:
            at = frame.tell()
            got, err = _read_into(self, memoryview(frame)[at:at + left - 1], tlog, errors)
            frame.seek(at + len(got))
            sensors = self._protocol._sensors          # (the transport counts what it is handed)
            if sensors and len(got):
                sensors.bytes_received.record(len(got))
            if err is not None or len(got) < left - 1:
                return b"", err
        view = getattr(self, "_streamtrain_scratch", None)
        if view is None:
            view = self._streamtrain_scratch = memoryview(bytearray(SCRATCH_BYTES))
        return _read_into(self, view, tlog, errors)

    _sock_recv._streamtrain = True
    transport.KafkaTCPTransport._sock_recv = _sock_recv


def _patch_frame_reads() -> None:
    """kafka-python 3's ``KafkaBytes.read`` (a response's fields) copies twice: a bytearray
    slice, then ``bytes`` of it. One copy instead (a memoryview slice), the same bytes."""
    from kafka.protocol.frame import KafkaBytes

    if getattr(KafkaBytes.read, "_streamtrain", False):
        return

    def read(self, nbytes=None):
        if nbytes is None:
            nbytes = len(self) - self._idx
        start = self._idx
        self._idx = min(start + nbytes, len(self))
        with memoryview(self) as view:
            return bytes(view[start:self._idx])

    read._streamtrain, read.original = True, KafkaBytes.read
    KafkaBytes.read = read


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

    def data_received(self, data):          # (the patched socket reads hand it views already)
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

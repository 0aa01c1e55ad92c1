"""The one Lua script of the Redis store: a chunked, idempotent, per-row compare-and-set.

``KEYS = [receipt, feed, row_1 .. row_n]`` (all in one slot), ``ARGV = [receipt_ms, segments,
feed_ms, then per segment: count, value length, ttl ms (0 = none), expected tags (8 bytes per
row, concatenated), new values (concatenated), parameter name, ids (8 bytes per row)]``. A
segment is a run of rows of one parameter; packing a segment's rows into a few strings keeps
the call cheap to send and to unpack.

With ``feed_ms > 0`` the script also appends what it wrote to the stream ``feed`` (the change
feed that prediction servers replicate the tables from, ``serve/replica.py``): one entry per
call, fields ``x`` (the answer's failed rows) then ``n``, ``i``, ``v`` (name, ids, values) per
segment, the strings it was sent, no copy row by row; entries more than ``feed_ms`` older than
the new one are trimmed (``XTRIM MINID ~``; the new entry's id is the server's clock, so the
script needs no ``TIME``, which the ACL recipe's ``+@read +@write +@scripting`` do not grant). Being in the script, an entry is appended in the same atomic step as
its writes: a stream's order is the order of the writes to every row it covers.

For each row, the new value is written only if the row's current 8-byte tag equals the
expected one (all zero bytes = the row must not exist: create-once; no written row has tag 0). The update arithmetic was done
by the client with the same numpy rule as the memory store, from the value carrying that tag;
every write carries a fresh random tag, so "tag unchanged" means "nobody wrote this row since I
read it", and the check and the write run inside one script, which Redis runs atomically.
So no update is lost and none is applied twice (a row that failed the check is re-read,
recomputed and retried by the client).

The script records its answer under ``receipt`` for ``receipt_ms``: if a connection drops after
the script ran, the retried call returns the recorded answer instead of writing again.
A chunk is at most ``MAX_ROWS`` rows, so the server is never blocked for long.
The answer is ``"ok:"`` followed by the comma-separated 1-based numbers of the rows not written.
"""
from __future__ import annotations

CAS = r"""
local done = redis.call('GET', KEYS[1])
if done then return done end
local sub, zero = string.sub, string.rep('\0', 8)
local n = #KEYS - 2
local vals = redis.call('MGET', unpack(KEYS, 3, n + 2))
local failed, sets, m, nf = {}, {}, 0, 0
local feed_ms = tonumber(ARGV[3])
local fields, nfield = {'x', ''}, 2
local i, a = 0, 4
for s = 1, tonumber(ARGV[2]) do
  local count, len, ttl = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local tags, blob = ARGV[a + 3], ARGV[a + 4]
  if feed_ms > 0 then
    fields[nfield + 1] = 'n'; fields[nfield + 2] = ARGV[a + 5]
    fields[nfield + 3] = 'i'; fields[nfield + 4] = ARGV[a + 6]
    fields[nfield + 5] = 'v'; fields[nfield + 6] = blob
    nfield = nfield + 6
  end
  a = a + 7
  for j = 1, count do
    i = i + 1
    local v = vals[i]
    local cur = zero
    if v then cur = sub(v, 1, 8) end
    if cur == sub(tags, 8 * j - 7, 8 * j) then
      local value = sub(blob, (j - 1) * len + 1, j * len)
      if ttl > 0 then
        redis.call('SET', KEYS[i + 2], value, 'PX', ttl)
      else
        m = m + 1; sets[m] = KEYS[i + 2]; m = m + 1; sets[m] = value
      end
    else
      nf = nf + 1; failed[nf] = i
    end
  end
end
if m > 0 then redis.call('MSET', unpack(sets)) end
local answer = 'ok:' .. table.concat(failed, ',')
if feed_ms > 0 and nf < n then
  fields[2] = answer
  local id = redis.call('XADD', KEYS[2], '*', unpack(fields))
  local cutoff = tonumber(string.match(id, '^%d+')) - feed_ms
  redis.call('XTRIM', KEYS[2], 'MINID', '~', string.format('%.0f', cutoff))
end
redis.call('SET', KEYS[1], answer, 'PX', ARGV[1])
return answer
"""

# Rows per script call. unpack() must stay under Lua's C-stack limit (8000); below that, smaller
# chunks cost the server less per row: a chunk's keys are still in the CPU cache when its MSET
# looks them up again after its MGET (BENCHMARKS.md, issue 11, "Redis store push": 500 rows
# took 15-25 % less redis-server CPU per row than 2000).
MAX_ROWS = 500


def parse_answer(answer) -> list[int]:
    """0-based positions of the rows a CAS call did not write."""
    if isinstance(answer, bytes):
        answer = answer.decode()
    if not isinstance(answer, str) or not answer.startswith("ok:"):
        raise ValueError(f"unexpected answer from the CAS script: {answer!r}")
    body = answer[3:]
    return [int(x) - 1 for x in body.split(",")] if body else []

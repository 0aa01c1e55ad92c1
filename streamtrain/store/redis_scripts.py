"""The one Lua script of the Redis store: a chunked, idempotent, per-row compare-and-set.

``KEYS = [receipt, row_1 .. row_n]`` (all in one slot), ``ARGV = [stride, receipt_ms,
then per row: expected tag, new value, (ttl ms when stride is 3)]``.

For each row, the new value is written only if the row's current 8-byte tag equals the
expected one (``""`` = the row must not exist: create-once). The update arithmetic was done
by the client with the same numpy rule as the memory store, from the value carrying that tag;
every write carries a fresh random tag, so "tag unchanged" means "nobody wrote this row since I
read it", and the check and the write run inside one script, which Redis runs atomically.
So no update is lost and none is applied twice (a row that failed the check is re-read,
recomputed and retried by the client).

The script records its answer under ``receipt`` for ``receipt_ms``: if a connection drops after
the script ran, the retried call returns the recorded answer instead of writing again.
A chunk is at most a few thousand rows, so the server is never blocked for long.
The answer is ``"ok:"`` followed by the comma-separated 1-based numbers of the rows not written.
"""
from __future__ import annotations

CAS = r"""
local done = redis.call('GET', KEYS[1])
if done then return done end
local n = #KEYS - 1
local stride = tonumber(ARGV[1])
local vals = redis.call('MGET', unpack(KEYS, 2, n + 1))
local failed, sets = {}, {}
for i = 1, n do
  local v = vals[i]
  local cur = ''
  if v then cur = string.sub(v, 1, 8) end
  local a = 3 + (i - 1) * stride
  if cur == ARGV[a] then
    if stride == 3 and tonumber(ARGV[a + 2]) > 0 then
      redis.call('SET', KEYS[i + 1], ARGV[a + 1], 'PX', ARGV[a + 2])
    else
      sets[#sets + 1] = KEYS[i + 1]
      sets[#sets + 1] = ARGV[a + 1]
    end
  else
    failed[#failed + 1] = i
  end
end
if #sets > 0 then redis.call('MSET', unpack(sets)) end
local answer = 'ok:' .. table.concat(failed, ',')
redis.call('SET', KEYS[1], answer, 'PX', ARGV[2])
return answer
"""

MAX_ROWS = 2000      # rows per script call: unpack() stays under Lua's C-stack limit (8000)


def parse_answer(answer) -> list[int]:
    """0-based positions of the rows a CAS call did not write."""
    if isinstance(answer, bytes):
        answer = answer.decode()
    if not isinstance(answer, str) or not answer.startswith("ok:"):
        raise ValueError(f"unexpected answer from the CAS script: {answer!r}")
    body = answer[3:]
    return [int(x) - 1 for x in body.split(",")] if body else []

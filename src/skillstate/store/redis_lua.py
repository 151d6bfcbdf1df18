"""The Lua scripts of the Redis store (:mod:`skillstate.store.redis`).

Each script is one atomic step on the server. They are kept here, apart from the
store's Python, so both stay readable; the layout they work on is described in
the store's module docstring.

Scripts that read the server's clock (``TIME``) and then write first ask for
effects replication (``redis.replicate_commands``): Redis 3.2 to 4 forbid writes
after a non-deterministic command otherwise; from Redis 5 on it is the default
and from 7 the call is a no-op.
"""

from __future__ import annotations

__all__ = [
    "CHECKPOINT",
    "CLAIM",
    "COMMIT",
    "CONVERT_LEASE",
    "FORCE_RELEASE",
    "POST",
    "RELEASE",
]

_NOW = """
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""
"""Sets ``now``: the server's clock in whole milliseconds since the epoch."""

# KEYS: task, cp, snap, ev, tasks, lease, sum
# ARGV: expected, version, state, event, patch ('' = none), is_delta ('1'/'0'),
#       len(patch), len(state), max_chain, now, task_id, body ('' = state as is),
#       digest (the head's), fence ('' = no check), version digest (the version's)
# Returns "NEW_VERSION CHAIN_LEN CHAIN_BYTES" (committed: one string, the cheapest
# reply to read), {0, actual_head_version} (stale), {2, worker|false,
# generation|false} (the fence does not match the lease as it is) or {3} (the task
# record's version is not a number).
#
# event, patch and body arrive as stored: compressed (binary) when long, which Lua
# strings carry unchanged. The snapshot decision is chain.take_snapshot verbatim. The
# two lengths come from Python because the rule counts the characters of the
# uncompressed texts (len(str)) while Lua's # counts bytes; the stored SIZE, in
# contrast, is the bytes stored, as CheckpointInfo.size is everywhere. body is the
# snapshot as it is to be stored (compressed) when Python expects a snapshot or cannot
# tell; when it is empty and the script snapshots anyway, the state is stored as is.
# The fence holds while the lease is held (a worker, expired or not) with that
# generation: chain.check_fence. The task hash is written last: Redis does not roll
# a script back, so if it were ever cut short (out of memory) the head would not
# have moved and the next commit of the same version simply overwrites the
# half-written fields.
COMMIT = """
if ARGV[14] ~= '' then
  local lease = redis.call('HMGET', KEYS[6], 'worker', 'generation')
  if not lease[1] or tonumber(lease[2]) ~= tonumber(ARGV[14]) then
    return {2, lease[1], lease[2]}
  end
end
local cur = redis.call('HMGET', KEYS[1], 'version', 'chain_len', 'chain_bytes')
local head = 0
if cur[1] then
  head = tonumber(cur[1])
  if not head then
    return {3}
  end
end
if head ~= tonumber(ARGV[1]) then
  return {0, head}
end
local chain_len = tonumber(cur[2]) or 0
local chain_bytes = tonumber(cur[3]) or 0
-- Counters changed outside skillstate (load refuses them): a snapshot resets them.
local damaged = chain_len < 0 or chain_bytes < 0 or chain_len % 1 ~= 0
  or chain_bytes % 1 ~= 0 or (cur[1] and not (tonumber(cur[2]) and tonumber(cur[3])))
local version, state, patch, digest = ARGV[2], ARGV[3], ARGV[5], ARGV[13]
local patch_len, state_len = tonumber(ARGV[7]), tonumber(ARGV[8])
local snapshot
if damaged or ARGV[6] ~= '1' or patch == '' or chain_len + 1 > tonumber(ARGV[9]) then
  snapshot = true
else
  snapshot = chain_bytes + patch_len >= state_len
end
local now = ARGV[10]
if snapshot then
  local body = ARGV[12]
  if body == '' then
    body = state
  end
  chain_len, chain_bytes = 0, 0
  redis.call('HSET', KEYS[2], version, 'S ' .. #body .. ' ' .. now .. ' ' .. patch)
  redis.call('HSET', KEYS[3], version, body)
else
  chain_len, chain_bytes = chain_len + 1, chain_bytes + patch_len
  redis.call('HSET', KEYS[2], version, 'D ' .. #patch .. ' ' .. now .. ' ' .. patch)
end
redis.call('HSET', KEYS[7], version, ARGV[15])
redis.call('HSET', KEYS[4], version, ARGV[4])
if head == 0 then
  redis.call('ZADD', KEYS[5], 0, ARGV[11])
end
redis.call('HSET', KEYS[1], 'version', version, 'head', state, 'chain_len', chain_len,
  'chain_bytes', chain_bytes, 'updated_at', now, 'digest', digest)
return version .. ' ' .. chain_len .. ' ' .. chain_bytes
"""

# KEYS: task, cp, snap, sum; ARGV: version
# Returns {0} (no task), {1, head, updated_at, digest|false} (the head), {3} (no such
# version) or {2, snapshot|false, record(v), digest(v)|false, record(v-1),
# digest(v-1)|false, ..., record(start), digest(start)|false}: the records back to
# the nearest snapshot, or to the first gap (then rebuild reports the broken chain).
# One script rather than a walk from Python: the walk is a chain of dependent reads,
# and a concurrent prune cannot slip between them.
CHECKPOINT = """
local head = redis.call('HMGET', KEYS[1], 'version', 'head', 'updated_at', 'digest')
if not head[1] then
  return {0}
end
local v = tonumber(ARGV[1])
if tonumber(head[1]) == v then
  return {1, head[2], head[3], head[4]}
end
local out = {2, false}
local u = v
while u >= 1 do
  local rec = redis.call('HGET', KEYS[2], u)
  if not rec then
    break
  end
  out[#out + 1] = rec
  out[#out + 1] = redis.call('HGET', KEYS[4], u)
  if string.sub(rec, 1, 1) == 'S' then
    out[2] = redis.call('HGET', KEYS[3], u)
    break
  end
  u = u - 1
end
if #out == 2 then
  return {3}
end
return out
"""

# KEYS: lease; ARGV: worker, ttl_ms, horizon_ms
# Returns {1, generation, expires_ms} (claimed), {0, holder, expires_ms} (held by a
# live other worker) or {3} (the lease is damaged: Python reads it and says how).
# The lease is a hash: worker (absent once released), generation, expires (ms since
# the epoch on the server's clock, the clock expiry is judged by). It is never
# deleted, so the generation survives releases and expiry: chain.claim_generation.
# A held lease whose expiry is not a number, or lies beyond horizon_ms from now, or
# a generation that is not a counter, is damage: reported, never overwritten.
CLAIM = (
    _NOW
    + """
local cur = redis.call('HMGET', KEYS[1], 'worker', 'generation', 'expires')
local holder, gen, expires = cur[1], cur[2], cur[3]
local g = 0
if gen then
  g = tonumber(gen)
  if not g or g < 0 or g ~= math.floor(g) then
    return {3}
  end
end
if holder then
  local e = tonumber(expires)
  if not e or e < 0 or e > now + tonumber(ARGV[3]) then
    return {3}
  end
  if holder ~= ARGV[1] then
    if e > now then
      return {0, holder, e}
    end
    g = g + 1
  end
else
  g = g + 1
end
local e = now + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'worker', ARGV[1], 'generation', g, 'expires', e)
return {1, g, e}
"""
)

# KEYS: lease; ARGV: worker. Releases the lease only if this worker holds it; the
# generation stays.
RELEASE = """
if redis.call('HGET', KEYS[1], 'worker') == ARGV[1] then
  redis.call('HDEL', KEYS[1], 'worker')
end
return 0
"""

# KEYS: lease. Releases whoever holds it; returns {0} (none held) or
# {1, worker, generation|false, expires|false} as they were. A generation that is not
# a counter is replaced by the clock's seconds (chain.repaired_generation).
FORCE_RELEASE = (
    _NOW
    + """
local cur = redis.call('HMGET', KEYS[1], 'worker', 'generation', 'expires')
if not cur[1] then
  return {0}
end
redis.call('HDEL', KEYS[1], 'worker')
local g = tonumber(cur[2])
if not g or g < 0 or g ~= math.floor(g) then
  redis.call('HSET', KEYS[1], 'generation', math.floor(now / 1000))
end
return {1, cur[1], cur[2], cur[3]}
"""
)

# KEYS: a lease key of layout 1 (a string: the worker, expiring with PX). Turns it
# into the layout 2 hash with the same holder and expiry and generation 0; an
# expired or released one is simply gone. Does nothing to a key that is not a string,
# so running it twice (or concurrently) is harmless.
CONVERT_LEASE = (
    _NOW
    + """
if redis.call('TYPE', KEYS[1]).ok ~= 'string' then
  return 0
end
local holder = redis.call('GET', KEYS[1])
local left = redis.call('PTTL', KEYS[1])
redis.call('DEL', KEYS[1])
if holder and left > 0 then
  redis.call('HSET', KEYS[1], 'worker', holder, 'generation', 0, 'expires', now + left)
end
return 1
"""
)

# KEYS: task, inbox; ARGV: the message as stored (JSON: kind, at, body). Appends it to
# the task's inbox list and returns its number (the list's new length: one script at
# a time, so two posts never get the same one), or 0 when the task does not exist.
POST = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
return redis.call('RPUSH', KEYS[2], ARGV[1])
"""

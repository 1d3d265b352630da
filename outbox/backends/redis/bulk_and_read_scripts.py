"""The Redis outbox's Lua scripts for changes of many entries (requeue, retry_now, purge) and
for reads (scan, stats, pending_groups). They start with scripts.py's PRELUDE like every other
(lua.py prepends it), and follow its rules."""

from __future__ import annotations

# ARGV: prefix, now_ms, ids... Returns how many DEAD entries became PENDING.
REQUEUE = """
local now, n = ARGV[2], 0
for a = 3, #ARGV do
  local id = ARGV[a]
  local h = ekey(id)
  local f = redis.call('HMGET', h, 'state', 'seq', 'created', 'grp')
  if f[1] == 'DEAD' then
    redis.call('HSET', h, 'state', 'PENDING', 'attempts', 0, 'nst', now, 'changed', now,
      'owner', '', 'lease', 0)
    redis.call('ZREM', P .. ':s:DEAD', id)
    redis.call('ZREM', P .. ':t:DEAD', id)
    redis.call('ZADD', P .. ':s:PENDING', f[2], id)
    redis.call('ZADD', P .. ':created', f[3], id)
    redis.call('HINCRBY', COUNTS, 'dead', -1)
    redis.call('HINCRBY', COUNTS, 'pending', 1)
    if f[4] == '' then
      redis.call('ZADD', DUE, now, dmember(f[2], id))
    else
      local gk = P .. ':g:' .. f[4]
      local head = redis.call('ZRANGE', gk, 0, 0, 'WITHSCORES')
      if not head[1] then
        redis.call('ZADD', DUE, now, dmember(f[2], id))
        redis.call('SADD', GROUPS, f[4])
      elseif tonumber(head[2]) > tonumber(f[2]) then
        -- Older than its group's head, it goes first; the old head stops being claimable.
        -- Should the old head be leased, this one waits for that lease to end rather than be
        -- sent beside it: a group never has two entries in flight.
        local due = now
        local o = redis.call('HMGET', ekey(head[1]), 'owner', 'lease')
        if o[1] ~= '' and tonumber(o[2]) > tonumber(now) then
          due = o[2]
          redis.call('HSET', h, 'nst', due)
        end
        redis.call('ZREM', DUE, dmember(head[2], head[1]))
        redis.call('ZADD', DUE, due, dmember(f[2], id))
      end
      redis.call('ZADD', gk, f[2], id)
    end
    n = n + 1
  end
end
return n
"""

# ARGV: prefix, now_ms, ids... Returns how many PENDING entries due later became due now. Left
# alone: entries due already, under a live lease, or of a FIFO group with an entry under a live
# lease (found once per call from P:leases: the entries in flight, a few per resend worker).
RETRY_NOW = """
local now, n, busy = ARGV[2], 0, nil
local now_n = tonumber(now)
for a = 3, #ARGV do
  local id = ARGV[a]
  local h = ekey(id)
  local f = redis.call('HMGET', h, 'state', 'nst', 'owner', 'lease', 'grp', 'seq')
  if f[1] == 'PENDING' and tonumber(f[2]) > now_n
      and not (f[3] ~= '' and tonumber(f[4]) > now_n) then
    local free = true
    if f[5] ~= '' then
      if busy == nil then
        busy = {}
        for _, leased in ipairs(redis.call('ZRANGEBYSCORE', LEASES, '(' .. now, '+inf')) do
          local grp = redis.call('HGET', ekey(leased), 'grp')
          if grp and grp ~= '' then busy[grp] = true end
        end
      end
      free = not busy[f[5]]
    end
    if free then
      redis.call('HSET', h, 'nst', now)
      -- Only claimable entries are in P:due: a FIFO entry behind its head enters it later,
      -- with the time it has then.
      local member = dmember(f[6], id)
      if redis.call('ZSCORE', DUE, member) then redis.call('ZADD', DUE, due_score(h), member) end
      n = n + 1
    end
  end
end
return n
"""

# ARGV: prefix, state (DELIVERED or DEAD), before_ms, batch_max. Returns how many were deleted.
PURGE = """
local state = ARGV[2]
local ids = redis.call('ZRANGEBYSCORE', P .. ':t:' .. state, '-inf', '(' .. ARGV[3],
  'LIMIT', 0, tonumber(ARGV[4]))
for _, id in ipairs(ids) do
  local h = ekey(id)
  local size = tonumber(redis.call('HGET', h, 'size')) or 0
  redis.call('DEL', h)
  redis.call('ZREM', P .. ':s:' .. state, id)
  redis.call('ZREM', P .. ':t:' .. state, id)
  if state == 'DEAD' then
    redis.call('HINCRBY', COUNTS, 'dead', -1)
    redis.call('HINCRBY', COUNTS, 'bytes', -size)
  else
    redis.call('HINCRBY', COUNTS, 'delivered', -1)
  end
end
return #ids
"""

# ARGV: prefix, state ('' for all), after_seq, limit. Returns HGETALLs in seq order.
SCAN = """
local states = {ARGV[2]}
if ARGV[2] == '' then states = {'PENDING', 'DELIVERED', 'DEAD'} end
local limit = tonumber(ARGV[4])
local found = {}
for _, state in ipairs(states) do
  local page = redis.call('ZRANGEBYSCORE', P .. ':s:' .. state, '(' .. ARGV[3], '+inf',
    'WITHSCORES', 'LIMIT', 0, limit)
  for k = 1, #page, 2 do found[#found + 1] = {tonumber(page[k + 1]), page[k]} end
end
table.sort(found, function(x, y) return x[1] < y[1] end)
local out = {}
for k = 1, math.min(limit, #found) do out[k] = redis.call('HGETALL', ekey(found[k][2])) end
return out
"""

# ARGV: prefix, now_ms. Returns {pending, dead, delivered, bytes, in_flight, oldest created_ms
# or false, next due score or false}. A script, not MULTI: it reads, so a server at its
# maxmemory still answers it.
STATS = """
local counts = redis.call('HMGET', COUNTS, 'pending', 'dead', 'delivered', 'bytes')
local oldest = redis.call('ZRANGE', P .. ':created', 0, 0, 'WITHSCORES')[2] or false
local soonest = redis.call('ZRANGE', DUE, 0, 0, 'WITHSCORES')[2] or false
local in_flight = redis.call('ZCOUNT', LEASES, '(' .. ARGV[2], '+inf')
return {counts[1] or '0', counts[2] or '0', counts[3] or '0', counts[4] or '0', in_flight,
  oldest, soonest}
"""

# ARGV: prefix. Returns the P:groups members (group names, as in P:g:<name>) that have PENDING
# entries. P:groups came after the other keys: an outbox that predates it gets it built here
# once, by a SCAN of its P:g:* keys (the one time this script walks the keyspace), and
# P:groups:ready says it was. A member whose P:g key is gone (dropped by a sidecar of a version
# without P:groups) is removed on the way.
PENDING_GROUPS = r"""
local READY = P .. ':groups:ready'
if redis.call('EXISTS', READY) == 0 then
  local pattern = string.gsub(P, '[%*%?%[%]\\]', '\\%0') .. ':g:*'
  local cursor = '0'
  repeat
    local page = redis.call('SCAN', cursor, 'MATCH', pattern, 'COUNT', 1000)
    cursor = page[1]
    for _, key in ipairs(page[2]) do redis.call('SADD', GROUPS, string.sub(key, #P + 4)) end
  until cursor == '0'
  redis.call('SET', READY, '1')
end
local found = {}
for _, grp in ipairs(redis.call('SMEMBERS', GROUPS)) do
  if redis.call('EXISTS', P .. ':g:' .. grp) == 1 then
    found[#found + 1] = grp
  else
    redis.call('SREM', GROUPS, grp)
  end
end
return found
"""

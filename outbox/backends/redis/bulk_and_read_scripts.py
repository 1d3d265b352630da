"""The Redis outbox's Lua scripts for changes of many entries (requeue, retry_now, purge) and
for reads (scan, stats, pending_groups). They start with scripts.py's PRELUDE like every other
(runner.py prepends it), and follow its rules: a read phase that touches declared keys only,
then the writes.

A requeued FIFO entry older than its group's leased head is due when that lease ends rather than
at once, so that the group never has two entries in flight.
"""

from __future__ import annotations

# ARGV: key base, now_ms, ids... KEYS: the entries'; found on the way: their groups and each
# group's head. Result: how many DEAD entries became PENDING.
REQUEUE = """
local now, n = ARGV[2], 0
for a = 3, #ARGV do
  local h = ekey(ARGV[a])
  if not LOOSE and has(h) then
    local f = call('HMGET', h, 'state', 'grp')
    if f[1] == 'DEAD' and f[2] ~= '' and has(gkey(f[2])) then
      local head = call('ZRANGE', gkey(f[2]), 0, 0)[1]
      if head then has(ekey(head)) end
    end
  end
end
local need = needed()
if need then return need end
for a = 3, #ARGV do
  local id = ARGV[a]
  local h = ekey(id)
  local f = call('HMGET', h, 'state', 'seq', 'created', 'grp')
  if f[1] == 'DEAD' then
    call('HSET', h, 'state', 'PENDING', 'attempts', 0, 'nst', now, 'changed', now,
      'owner', '', 'lease', 0)
    call('ZREM', S_DEAD, id)
    call('ZREM', T_DEAD, id)
    call('ZADD', S_PENDING, f[2], id)
    call('ZADD', CREATED, f[3], id)
    call('HINCRBY', COUNTS, 'dead', -1)
    call('HINCRBY', COUNTS, 'pending', 1)
    if f[4] == '' then
      call('ZADD', DUE, now, dmember(f[2], id))
    else
      local gk = gkey(f[4])
      local head = call('ZRANGE', gk, 0, 0, 'WITHSCORES')
      if not head[1] then
        call('ZADD', DUE, now, dmember(f[2], id))
        call('SADD', GROUPS, f[4])
      elseif tonumber(head[2]) > tonumber(f[2]) then
        -- Older than its group's head, it goes first; the old head stops being claimable.
        -- Should the old head be leased, this one waits for that lease to end rather than be
        -- sent beside it: a group never has two entries in flight.
        local due = now
        local o = call('HMGET', ekey(head[1]), 'owner', 'lease')
        if o[1] ~= '' and tonumber(o[2]) > tonumber(now) then
          due = o[2]
          call('HSET', h, 'nst', due)
        end
        call('ZREM', DUE, dmember(head[2], head[1]))
        call('ZADD', DUE, due, dmember(f[2], id))
      end
      call('ZADD', gk, f[2], id)
    end
    n = n + 1
  end
end
return done(n)
"""

# ARGV: key base, now_ms, ids... KEYS: the entries'; found on the way, when one of them is in a
# FIFO group: the entries under a live lease (a few per resend worker). Result: how many
# PENDING entries due later became due now. Left alone: entries due already, under a live
# lease, or of a FIFO group with an entry under a live lease.
RETRY_NOW = """
local now = ARGV[2]
local now_n = tonumber(now)
local grouped = false
for a = 3, #ARGV do
  local h = ekey(ARGV[a])
  if has(h) then
    local grp = call('HGET', h, 'grp')
    if grp and grp ~= '' then grouped = true end
  end
end
local leased = {}
if grouped then
  leased = call('ZRANGEBYSCORE', LEASES, '(' .. now, '+inf')
  for _, id in ipairs(leased) do has(ekey(id)) end
end
local need = needed()
if need then return need end
local busy = {}
for _, id in ipairs(leased) do
  local grp = call('HGET', ekey(id), 'grp')
  if grp and grp ~= '' then busy[grp] = true end
end
local n = 0
for a = 3, #ARGV do
  local id = ARGV[a]
  local h = ekey(id)
  local f = call('HMGET', h, 'state', 'nst', 'owner', 'lease', 'grp', 'seq')
  if f[1] == 'PENDING' and tonumber(f[2]) > now_n
      and not (f[3] ~= '' and tonumber(f[4]) > now_n) and not busy[f[5]] then
    call('HSET', h, 'nst', now)
    -- Only claimable entries are in P:due: a FIFO entry behind its head enters it later,
    -- with the time it has then.
    local member = dmember(f[6], id)
    if call('ZSCORE', DUE, member) then call('ZADD', DUE, due_score(h), member) end
    n = n + 1
  end
end
return done(n)
"""

# ARGV: key base, state (DELIVERED or DEAD), before_ms, batch_max. KEYS: found on the way (the
# entries to delete). Result: how many were deleted.
PURGE = """
local state = ARGV[2]
local S, T = S_DELIVERED, T_DELIVERED
if state == 'DEAD' then S, T = S_DEAD, T_DEAD end
local ids = call('ZRANGEBYSCORE', T, '-inf', '(' .. ARGV[3], 'LIMIT', 0, tonumber(ARGV[4]))
for _, id in ipairs(ids) do has(ekey(id)) end
local need = needed()
if need then return need end
for _, id in ipairs(ids) do
  local h = ekey(id)
  local size = tonumber(call('HGET', h, 'size')) or 0
  call('DEL', h)
  call('ZREM', S, id)
  call('ZREM', T, id)
  if state == 'DEAD' then
    call('HINCRBY', COUNTS, 'dead', -1)
    call('HINCRBY', COUNTS, 'bytes', -size)
  else
    call('HINCRBY', COUNTS, 'delivered', -1)
  end
end
return done(#ids)
"""

# ARGV: key base, state ('' for all), after_seq, limit. KEYS: found on the way (the entries
# read). Result: HGETALLs in seq order.
SCAN = """
local by_state = {PENDING = S_PENDING, DELIVERED = S_DELIVERED, DEAD = S_DEAD}
local states = {ARGV[2]}
if ARGV[2] == '' then states = {'PENDING', 'DELIVERED', 'DEAD'} end
local limit = tonumber(ARGV[4])
local found = {}
for _, state in ipairs(states) do
  local page = call('ZRANGEBYSCORE', by_state[state], '(' .. ARGV[3], '+inf',
    'WITHSCORES', 'LIMIT', 0, limit)
  for k = 1, #page, 2 do found[#found + 1] = {tonumber(page[k + 1]), page[k]} end
end
table.sort(found, function(x, y) return x[1] < y[1] end)
for k = 1, math.min(limit, #found) do has(ekey(found[k][2])) end
local need = needed()
if need then return need end
local out = {}
for k = 1, math.min(limit, #found) do out[k] = call('HGETALL', ekey(found[k][2])) end
return done(out)
"""

# ARGV: key base, now_ms. Result {pending, dead, delivered, bytes, in_flight, oldest created_ms
# or false, next due score or false}. A script, not MULTI: it reads, so a server at its
# maxmemory still answers it.
STATS = """
local counts = call('HMGET', COUNTS, 'pending', 'dead', 'delivered', 'bytes')
local oldest = call('ZRANGE', CREATED, 0, 0, 'WITHSCORES')[2] or false
local soonest = call('ZRANGE', DUE, 0, 0, 'WITHSCORES')[2] or false
local in_flight = call('ZCOUNT', LEASES, '(' .. ARGV[2], '+inf')
return done({counts[1] or '0', counts[2] or '0', counts[3] or '0', counts[4] or '0', in_flight,
  oldest, soonest})
"""

# ARGV: key base. KEYS: found on the way (the groups' keys). Result: the P:groups members (group
# names, as in P:g:<name>) that have PENDING entries. P:groups came after the other keys: an
# outbox that predates it gets it built here once, from a SCAN of its P:g:* keys (the one time
# this script walks the keyspace: on a Cluster, the node's, which holds the outbox's slot), and
# P:groups:ready says it was. A member whose P:g key is gone (dropped by a sidecar of a version
# without P:groups) is removed on the way.
PENDING_GROUPS = r"""
local names, scanned = call('SMEMBERS', GROUPS), {}
if call('EXISTS', GROUPS_READY) == 0 then
  local pattern = string.gsub(P, '[%*%?%[%]\\]', '\\%0') .. ':g:*'
  local cursor = '0'
  repeat
    local page = redis.call('SCAN', cursor, 'MATCH', pattern, 'COUNT', 1000)
    cursor = page[1]
    for _, key in ipairs(page[2]) do scanned[#scanned + 1] = string.sub(key, #P + 4) end
  until cursor == '0'
end
for _, grp in ipairs(names) do has(gkey(grp)) end
for _, grp in ipairs(scanned) do has(gkey(grp)) end
local need = needed()
if need then return need end
if call('EXISTS', GROUPS_READY) == 0 then
  for _, grp in ipairs(scanned) do call('SADD', GROUPS, grp) end
  call('SET', GROUPS_READY, '1')
  names = call('SMEMBERS', GROUPS)
end
local found = {}
for _, grp in ipairs(names) do
  if call('EXISTS', gkey(grp)) == 1 then
    found[#found + 1] = grp
  else
    call('SREM', GROUPS, grp)
  end
end
return done(found)
"""

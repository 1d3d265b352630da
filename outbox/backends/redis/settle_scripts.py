"""The Redis outbox's Lua scripts that settle claimed entries: delivered, bury, reschedule and
release, and the end of a dead run's leases. They start with scripts.py's PRELUDE like every
other and follow its rules: a read phase that touches declared keys only, then the writes.

``expire_leases`` pages through ``P:leases`` (the entries under a lease: as many as resends in
flight over every sidecar sharing the outbox), outbox.EXPIRE_BATCH_MAX an atomic script call. A
lease that another sidecar moves meanwhile may be passed over: it then ends at its lease's end,
and its entry is claimed maybe stored all the same.
"""

from __future__ import annotations

# ARGV: key base, then per delivery: id, queue_id, queue_offset, delivered_ms, durable (0/1).
# KEYS: the entries' P:e keys; found on the way: their groups and each group's next head.
# Result {one character per delivery, '1' (delivered) or '0' (not PENDING), in order; the keys
# of the entries made claimable (declared calls: the next claim declares them)}.
DELIVERED = """
if not LOOSE then
  local leaving = {}
  for a = 2, #ARGV, 5 do
    local h = ekey(ARGV[a])
    if has(h) then
      local f = call('HMGET', h, 'state', 'grp')
      if f[1] == 'PENDING' then note_leaving(leaving, f[2], ARGV[a]) end
    end
  end
  leaving_reads(leaving)
  local need = needed()
  if need then return need end
end
local answers, delivered, freed = {}, 0, 0
for a = 2, #ARGV, 5 do
  local id, d_ms = ARGV[a], ARGV[a + 3]
  local h = ekey(id)
  if call('HGET', h, 'state') ~= 'PENDING' then
    answers[#answers + 1] = '0'
  else
    local f = call('HMGET', h, 'size', 'seq')
    leave_pending(id, h)
    call('HSET', h, 'state', 'DELIVERED', 'changed', d_ms, 'owner', '', 'lease', 0,
      'size', 0, 'q_id', ARGV[a + 1], 'q_off', ARGV[a + 2], 'd_ms', d_ms, 'durable', ARGV[a + 4])
    call('HDEL', h, 'body')
    call('ZADD', S_DELIVERED, f[2], id)
    call('ZADD', T_DELIVERED, d_ms, id)
    delivered, freed = delivered + 1, freed + tonumber(f[1])
    answers[#answers + 1] = '1'
  end
end
if delivered > 0 then
  call('HINCRBY', COUNTS, 'delivered', delivered)
  call('HINCRBY', COUNTS, 'bytes', -freed)
end
return done({table.concat(answers), MADE_DUE})
"""

# ARGV: key base, id, owner, error, now_ms. KEYS: the entry's; found on the way: its group and
# the group's next head. Result {1 or 0 (not PENDING, or not the owner), the keys of the entry
# made claimable (as DELIVERED's)}.
BURY = """
local id = ARGV[2]
local h = ekey(id)
if not LOOSE and has(h) then
  local f = call('HMGET', h, 'state', 'owner', 'grp')
  if f[1] == 'PENDING' and f[2] == ARGV[3] then
    local leaving = {}
    note_leaving(leaving, f[3], id)
    leaving_reads(leaving)
  end
end
local need = needed()
if need then return need end
local f = call('HMGET', h, 'state', 'owner', 'seq')
if f[1] ~= 'PENDING' or f[2] ~= ARGV[3] then return done({0, MADE_DUE}) end
leave_pending(id, h)
call('HSET', h, 'state', 'DEAD', 'err', ARGV[4], 'changed', ARGV[5], 'owner', '', 'lease', 0)
call('HINCRBY', h, 'attempts', 1)
call('HINCRBY', COUNTS, 'dead', 1)
call('ZADD', S_DEAD, f[3], id)
call('ZADD', T_DEAD, ARGV[5], id)
return done({1, MADE_DUE})
"""

# ARGV: key base, id, owner, next_send_time_ms ('' to keep it: release), then for a reschedule
# error and maybe_stored (0/1: 1 sets ms = 1; 0 leaves ms as it was). KEYS: the entry's.
# Result 1 or 0 (not PENDING, or not the owner).
UNLEASE = """
local id = ARGV[2]
local h = ekey(id)
has(h)
local need = needed()
if need then return need end
local f = call('HMGET', h, 'state', 'owner', 'seq')
if f[1] ~= 'PENDING' or f[2] ~= ARGV[3] then return done(0) end
call('HSET', h, 'owner', '', 'lease', 0)
if ARGV[4] ~= '' then
  call('HSET', h, 'nst', ARGV[4], 'err', ARGV[5])
  call('HINCRBY', h, 'attempts', 1)
  if ARGV[6] == '1' then call('HSET', h, 'ms', '1') end
end
call('ZREM', LEASES, id)
if call('ZSCORE', DUE, dmember(f[3], id)) then
  call('ZADD', DUE, call('HGET', h, 'nst'), dmember(f[3], id))
end
return done(1)
"""

# ARGV: key base, owner_prefix, start, count. KEYS: found on the way (the leased entries). Ends
# the leases among the P:leases members of rank start .. start + count - 1 whose owner starts
# with owner_prefix: unleased, maybe stored (ms = 1), due at their next send time. Result
# {ended, kept}: the next page starts at start + kept (the ended ones left P:leases).
EXPIRE_LEASES = """
local owner_prefix, start, count = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local ids = call('ZRANGE', LEASES, start, start + count - 1)
for _, id in ipairs(ids) do has(ekey(id)) end
local need = needed()
if need then return need end
local ended = 0
for _, id in ipairs(ids) do
  local h = ekey(id)
  local f = call('HMGET', h, 'state', 'owner', 'seq', 'nst')
  if f[1] == 'PENDING' and f[2] and f[2] ~= ''
      and string.sub(f[2], 1, #owner_prefix) == owner_prefix then
    call('HSET', h, 'owner', '', 'lease', 0, 'ms', '1')
    call('ZREM', LEASES, id)
    local member = dmember(f[3], id)
    if call('ZSCORE', DUE, member) then call('ZADD', DUE, f[4], member) end
    ended = ended + 1
  end
end
return done({ended, #ids - ended})
"""

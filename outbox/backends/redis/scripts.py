"""The Redis outbox's Lua scripts (outbox/backends/redis/outbox.py has the key layout).

Each operation is one script, so it is atomic on the server: two sidecars never lease one entry,
the bound holds for all writers together, and an entry and its indexes never disagree. Every
script starts with PRELUDE and takes the key prefix as ARGV[1]; the keys are named from it in
the script (standalone or replicated Redis; on Redis Cluster, give the prefix a hash tag).

Numbers travel as strings where Lua would otherwise turn them into doubles printed with 14
significant digits.

``ALLOW_OOM`` is the first line of the scripts that take no new room (claims, the changes that
settle a claimed entry, tombstones, purges): on Redis 7 they run at ``maxmemory`` too, so that
a full Redis refuses new entries (PUT, whose first write is refused there) but not the drain,
which frees the bodies it delivers. Without the flag a claim's first write would be refused
alike. (A script without it is refused only at its first write command that may grow memory:
once it has written, Redis lets it finish, so none is ever cut halfway.)
"""

from __future__ import annotations

# Redis 7's script flags (a shebang line); Redis 6 cannot compile it (the outbox then runs the
# scripts without it).
ALLOW_OOM = "#!lua flags=allow-oom\n"

# Shared by every script: ARGV[1] is the prefix.
PRELUDE = """
local P = ARGV[1]
local DUE, LEASES, COUNTS = P .. ':due', P .. ':leases', P .. ':n'
local GROUPS = P .. ':groups'
local function ekey(id) return P .. ':e:' .. id end
-- A P:due member: the seq, zero-padded, then the id. Entries due at the same time leave in
-- seq order, as members of equal score sort by their bytes.
local function dmember(seq, id) return string.format('%016d', seq) .. id end
local function member_id(member) return string.sub(member, 17) end
local function due_score(h)
  local f = redis.call('HMGET', h, 'nst', 'owner', 'lease')
  if f[2] and f[2] ~= '' and tonumber(f[3]) > tonumber(f[1]) then return f[3] end
  return f[1]
end
-- PENDING entry id leaves its indexes; its group's next entry becomes claimable, or the group
-- leaves P:groups with its last PENDING entry.
local function leave_pending(id, h)
  local grp, seq = unpack(redis.call('HMGET', h, 'grp', 'seq'))
  redis.call('ZREM', DUE, dmember(seq, id))
  redis.call('ZREM', LEASES, id)
  redis.call('ZREM', P .. ':s:PENDING', id)
  redis.call('ZREM', P .. ':created', id)
  redis.call('HINCRBY', COUNTS, 'pending', -1)
  if grp ~= '' then
    local gk = P .. ':g:' .. grp
    local head = redis.call('ZRANGE', gk, 0, 0)[1]
    redis.call('ZREM', gk, id)
    if head == id then
      local nxt = redis.call('ZRANGE', gk, 0, 0, 'WITHSCORES')
      if nxt[1] then
        redis.call('ZADD', DUE, due_score(ekey(nxt[1])), dmember(nxt[2], nxt[1]))
      else
        redis.call('SREM', GROUPS, grp)
      end
    end
  end
end
"""

# ARGV: prefix, entries_max, bytes_max, then the JSON list of the requests, each the list of its
# entries' fields [message_id, next_send_time_ms, created_ms, attempts, state_changed_ms,
# group key, last_error, meta] (numbers as strings), then every body in the same order, one
# argument each. Returns {summary, stored...}: the summary says per request, ';' between them,
# "F<entries>,<bytes>" (refused by the bound) or "S" and per entry ",<seq>" (new) or ",=<k>"
# (already stored: the k-th HGETALL after the summary). One string rather than nested replies:
# redis-py parses replies in Python, element by element, on the thread every put waits for.
PUT = """
local entries_max, bytes_max = tonumber(ARGV[2]), tonumber(ARGV[3])
local requests = cjson.decode(ARGV[4])
local counts = redis.call('HMGET', COUNTS, 'pending', 'dead', 'bytes')
local held = (tonumber(counts[1]) or 0) + (tonumber(counts[2]) or 0)
local held_bytes = tonumber(counts[3]) or 0
-- First every request's verdict, in order, against the bound as the earlier ones leave it.
-- verdicts[r] is the refusal, or the set of entry numbers k that the request writes.
local known, verdicts, added, added_bytes, body = {}, {}, 0, 0, 5
for r, list in ipairs(requests) do
  local seen, fresh, new, new_bytes = {}, {}, 0, 0
  for k, e in ipairs(list) do
    local id = e[1]
    if not seen[id] then
      seen[id] = true
      if known[id] == nil then known[id] = redis.call('EXISTS', ekey(id)) == 1 end
      if not known[id] then
        fresh[k], new, new_bytes = true, new + 1, new_bytes + #ARGV[body + k - 1]
      end
    end
  end
  if held + new > entries_max or held_bytes + new_bytes > bytes_max then
    verdicts[r] = 'F' .. (held + new) .. ',' .. (held_bytes + new_bytes)
  else
    verdicts[r] = fresh
    held, held_bytes = held + new, held_bytes + new_bytes
    added, added_bytes = added + new, added_bytes + new_bytes
    for _, e in ipairs(list) do known[e[1]] = true end -- later requests find them stored
  end
  body = body + #list
end
-- Then the writes, one INCRBY for every new seq.
local seq = redis.call('INCRBY', P .. ':seq', added) - added
local by_seq, by_age = P .. ':s:PENDING', P .. ':created'
local reply, summary = {false}, {}
body = 5
for r, list in ipairs(requests) do
  local fresh = verdicts[r]
  if type(fresh) == 'table' then
    local parts = {'S'}
    for k, e in ipairs(list) do
      local id, h = e[1], ekey(e[1])
      if fresh[k] then
        seq = seq + 1
        local value, nst, grp = ARGV[body + k - 1], e[2], e[6]
        redis.call('HSET', h, 'id', id, 'meta', e[8], 'body', value, 'size', #value,
          'nst', nst, 'created', e[3], 'grp', grp, 'attempts', e[4], 'err', e[7],
          'changed', e[5], 'state', 'PENDING', 'seq', seq, 'owner', '', 'lease', 0)
        redis.call('ZADD', by_seq, seq, id)
        redis.call('ZADD', by_age, e[3], id)
        if grp == '' then
          redis.call('ZADD', DUE, nst, dmember(seq, id))
        else
          local gk = P .. ':g:' .. grp
          if redis.call('EXISTS', gk) == 0 then
            redis.call('ZADD', DUE, nst, dmember(seq, id))
            redis.call('SADD', GROUPS, grp)
          end
          redis.call('ZADD', gk, seq, id)
        end
        parts[#parts + 1] = string.format('%d', seq)
      else
        reply[#reply + 1] = redis.call('HGETALL', h)
        parts[#parts + 1] = '=' .. (#reply - 1)
      end
    end
    summary[r] = table.concat(parts, ',')
  else
    summary[r] = fresh
  end
  body = body + #list
end
if added > 0 then
  redis.call('HINCRBY', COUNTS, 'pending', added)
  redis.call('HINCRBY', COUNTS, 'bytes', added_bytes)
end
reply[1] = table.concat(summary, ';')
return reply
"""

# ARGV: prefix, now_ms, limit, lease_until_ms, owner. Returns the claimed entries' HGETALLs.
# Anything in P:due that is not a claimable entry (it cannot be, unless the keys were edited by
# hand) is dropped from it rather than claimed. An entry taken over an expired lease (its owner
# still set: no outcome was recorded) gets ms = 1: maybe stored.
CLAIM = """
local now, limit, lease_until, owner = ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
local claimed = {}
while #claimed < limit do
  local members = redis.call('ZRANGEBYSCORE', DUE, '-inf', now, 'LIMIT', 0, limit - #claimed)
  if #members == 0 then break end
  for _, member in ipairs(members) do
    local id = member_id(member)
    local h = ekey(id)
    local f = redis.call('HMGET', h, 'state', 'grp', 'owner')
    local head = true
    if f[1] == 'PENDING' and f[2] ~= '' then
      head = redis.call('ZRANGE', P .. ':g:' .. f[2], 0, 0)[1] == id
    end
    if f[1] ~= 'PENDING' or not head then
      redis.call('ZREM', DUE, member)
    else
      if f[3] and f[3] ~= '' then redis.call('HSET', h, 'ms', '1') end
      redis.call('HSET', h, 'owner', owner, 'lease', lease_until)
      redis.call('ZADD', DUE, lease_until, member)
      redis.call('ZADD', LEASES, lease_until, id)
      claimed[#claimed + 1] = redis.call('HGETALL', h)
    end
  end
end
return claimed
"""

# ARGV: prefix, then per delivery: id, queue_id, queue_offset, delivered_ms, durable (0/1).
# Returns one character per delivery, '1' (delivered) or '0' (not PENDING), in order.
DELIVERED = """
local answers, delivered, freed = {}, 0, 0
for a = 2, #ARGV, 5 do
  local id, d_ms = ARGV[a], ARGV[a + 3]
  local h = ekey(id)
  if redis.call('HGET', h, 'state') ~= 'PENDING' then
    answers[#answers + 1] = '0'
  else
    local f = redis.call('HMGET', h, 'size', 'seq')
    leave_pending(id, h)
    redis.call('HSET', h, 'state', 'DELIVERED', 'changed', d_ms, 'owner', '', 'lease', 0,
      'size', 0, 'q_id', ARGV[a + 1], 'q_off', ARGV[a + 2], 'd_ms', d_ms, 'durable', ARGV[a + 4])
    redis.call('HDEL', h, 'body')
    redis.call('ZADD', P .. ':s:DELIVERED', f[2], id)
    redis.call('ZADD', P .. ':t:DELIVERED', d_ms, id)
    delivered, freed = delivered + 1, freed + tonumber(f[1])
    answers[#answers + 1] = '1'
  end
end
if delivered > 0 then
  redis.call('HINCRBY', COUNTS, 'delivered', delivered)
  redis.call('HINCRBY', COUNTS, 'bytes', -freed)
end
return table.concat(answers)
"""

# ARGV: prefix, id, owner, error, now_ms. Returns 1 or 0 (not PENDING, or not the owner).
BURY = """
local id = ARGV[2]
local h = ekey(id)
local f = redis.call('HMGET', h, 'state', 'owner', 'seq')
if f[1] ~= 'PENDING' or f[2] ~= ARGV[3] then return 0 end
leave_pending(id, h)
redis.call('HSET', h, 'state', 'DEAD', 'err', ARGV[4], 'changed', ARGV[5], 'owner', '', 'lease', 0)
redis.call('HINCRBY', h, 'attempts', 1)
redis.call('HINCRBY', COUNTS, 'dead', 1)
redis.call('ZADD', P .. ':s:DEAD', f[3], id)
redis.call('ZADD', P .. ':t:DEAD', ARGV[5], id)
return 1
"""

# ARGV: prefix, id, owner, next_send_time_ms ('' to keep it: release), then for a reschedule
# error and maybe_stored (0/1: 1 sets ms = 1; 0 leaves ms as it was).
UNLEASE = """
local id = ARGV[2]
local h = ekey(id)
local f = redis.call('HMGET', h, 'state', 'owner', 'seq')
if f[1] ~= 'PENDING' or f[2] ~= ARGV[3] then return 0 end
redis.call('HSET', h, 'owner', '', 'lease', 0)
if ARGV[4] ~= '' then
  redis.call('HSET', h, 'nst', ARGV[4], 'err', ARGV[5])
  redis.call('HINCRBY', h, 'attempts', 1)
  if ARGV[6] == '1' then redis.call('HSET', h, 'ms', '1') end
end
redis.call('ZREM', LEASES, id)
if redis.call('ZSCORE', DUE, dmember(f[3], id)) then
  redis.call('ZADD', DUE, redis.call('HGET', h, 'nst'), dmember(f[3], id))
end
return 1
"""

# ARGV: prefix, owner_prefix, start, count. Ends the leases among the P:leases members of rank
# start .. start + count - 1 whose owner starts with owner_prefix: unleased, maybe stored
# (ms = 1), due at their next send time. Returns {ended, kept}: the next page starts at
# start + kept (the ended ones left P:leases).
EXPIRE_LEASES = """
local owner_prefix, start, count = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local ids = redis.call('ZRANGE', LEASES, start, start + count - 1)
local ended = 0
for _, id in ipairs(ids) do
  local h = ekey(id)
  local f = redis.call('HMGET', h, 'state', 'owner', 'seq', 'nst')
  if f[1] == 'PENDING' and f[2] and f[2] ~= ''
      and string.sub(f[2], 1, #owner_prefix) == owner_prefix then
    redis.call('HSET', h, 'owner', '', 'lease', 0, 'ms', '1')
    redis.call('ZREM', LEASES, id)
    local member = dmember(f[3], id)
    if redis.call('ZSCORE', DUE, member) then redis.call('ZADD', DUE, f[4], member) end
    ended = ended + 1
  end
end
return {ended, #ids - ended}
"""

"""The Redis outbox's Lua scripts: PRELUDE, put and claim (settle_scripts.py: settlements;
bulk_and_read_scripts.py: bulk changes and reads; outbox.py has the key layout).

Each operation is one script, so it is atomic on the server: two sidecars never lease one entry,
the bound holds for all writers together, and an entry and its indexes never disagree. Every key
a script touches is declared in KEYS (PRELUDE says how, runner.py runs them): on Redis Cluster
the call goes to the master of the outbox's one slot, and a slot being moved refuses it whole
(TRYAGAIN, ASK) rather than halfway.

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

# Shared by every script. ARGV[1] is the key base (the prefix, hash-tagged on a Cluster); the
# keys are named from it. Two ways to call a script (runner.py):
# - declared (a Cluster): KEYS holds the fixed keys (keys.FIXED_KEYS) and the per-entry and
#   per-group keys the caller can name. The script touches no other (``call`` refuses one): it
#   reads first, and when it finds it needs keys it was not given it writes nothing and answers
#   {1, key...}; the runner calls it again with those declared too.
# - loose (KEYS empty: one server, Sentinel's master): the script touches the keys it finds as
#   it goes, in one call, as it did before Cluster support. Redis allows it outside a Cluster.
# The answer is {0, result} otherwise.
PRELUDE = """
local P = ARGV[1]
local LOOSE = #KEYS == 0
local DUE, LEASES, COUNTS, GROUPS = P .. ':due', P .. ':leases', P .. ':n', P .. ':groups'
local S_PENDING, CREATED, SEQ = P .. ':s:PENDING', P .. ':created', P .. ':seq'
local S_DELIVERED, T_DELIVERED = P .. ':s:DELIVERED', P .. ':t:DELIVERED'
local S_DEAD, T_DEAD, GROUPS_READY = P .. ':s:DEAD', P .. ':t:DEAD', P .. ':groups:ready'
local DECLARED, NEEDED = {}, {}
for _, key in ipairs(KEYS) do DECLARED[key] = true end
-- The read phase's test: true for a declared key; any other is noted as needed (once).
local function has(key)
  if LOOSE or DECLARED[key] then return true end
  if DECLARED[key] == nil then
    DECLARED[key] = false
    NEEDED[#NEEDED + 1] = key
  end
  return false
end
-- Every command on a key goes through call, which refuses an undeclared one before Redis
-- sees it (a read phase that missed a key is a bug, found by the tests on any Redis).
local function call(command, key, ...)
  if not (LOOSE or DECLARED[key]) then
    return error('rocketbox outbox: undeclared key ' .. key)
  end
  return redis.call(command, key, ...)
end
-- The reply that asks for the keys noted by has (nothing was written), or nil.
local function needed()
  if #NEEDED == 0 then return nil end
  local reply = {1}
  for i, key in ipairs(NEEDED) do reply[i + 1] = key end
  return reply
end
local function done(result) return {0, result} end
local function ekey(id) return P .. ':e:' .. id end
local function gkey(grp) return P .. ':g:' .. grp end
-- A P:due member: the seq, zero-padded, then the id. Entries due at the same time leave in
-- seq order, as members of equal score sort by their bytes.
local function dmember(seq, id) return string.format('%016d', seq) .. id end
local function member_id(member) return string.sub(member, 17) end
local function due_score(h)
  local f = call('HMGET', h, 'nst', 'owner', 'lease')
  if f[2] and f[2] ~= '' and tonumber(f[3]) > tonumber(f[1]) then return f[3] end
  return f[1]
end
-- Read phase of entries leaving PENDING (leaving[grp] = {id = true, ...}): the keys
-- leave_pending touches beyond the entries' own: each group's key, and the entry that becomes
-- its head when the head leaves.
local function leaving_reads(leaving)
  for grp, ids in pairs(leaving) do
    local gk = gkey(grp)
    if has(gk) then
      local count = 0
      for _ in pairs(ids) do count = count + 1 end
      local members = call('ZRANGE', gk, 0, count)
      if members[1] and ids[members[1]] then
        for _, id in ipairs(members) do
          if not ids[id] then
            has(ekey(id))
            break
          end
        end
      end
    end
  end
end
local function note_leaving(leaving, grp, id)
  if grp and grp ~= '' then
    leaving[grp] = leaving[grp] or {}
    leaving[grp][id] = true
  end
end
-- Declared calls: the keys of the entries leave_pending made claimable, and their groups'.
local MADE_DUE = {}
-- PENDING entry id leaves its indexes; its group's next entry becomes claimable, or the group
-- leaves P:groups with its last PENDING entry.
local function leave_pending(id, h)
  local grp, seq = unpack(call('HMGET', h, 'grp', 'seq'))
  call('ZREM', DUE, dmember(seq, id))
  call('ZREM', LEASES, id)
  call('ZREM', S_PENDING, id)
  call('ZREM', CREATED, id)
  call('HINCRBY', COUNTS, 'pending', -1)
  if grp ~= '' then
    local gk = gkey(grp)
    local head = call('ZRANGE', gk, 0, 0)[1]
    call('ZREM', gk, id)
    if head == id then
      local nxt = call('ZRANGE', gk, 0, 0, 'WITHSCORES')
      if nxt[1] then
        call('ZADD', DUE, due_score(ekey(nxt[1])), dmember(nxt[2], nxt[1]))
        if not LOOSE then
          MADE_DUE[#MADE_DUE + 1] = ekey(nxt[1])
          MADE_DUE[#MADE_DUE + 1] = gk
        end
      else
        call('SREM', GROUPS, grp)
      end
    end
  end
end
"""

# ARGV: key base, entries_max, bytes_max, then the JSON list of the requests, each the list of
# its entries' fields [message_id, next_send_time_ms, created_ms, attempts, state_changed_ms,
# group key, last_error, meta] (numbers as strings), then every body in the same order, one
# argument each. KEYS: every entry's P:e key and every group's P:g key. Result {summary,
# stored...}: the summary says per request, ';' between them, "F<entries>,<bytes>" (refused by
# the bound) or "S" and per entry ",<seq>" (new) or ",=<k>" (already stored: the k-th HGETALL
# after the summary). One string rather than nested replies: redis-py parses replies in Python,
# element by element, on the thread every put waits for.
PUT = """
local entries_max, bytes_max = tonumber(ARGV[2]), tonumber(ARGV[3])
local requests = cjson.decode(ARGV[4])
for _, list in ipairs(requests) do
  for _, e in ipairs(list) do
    has(ekey(e[1]))
    if e[6] ~= '' then has(gkey(e[6])) end
  end
end
local need = needed()
if need then return need end
local counts = call('HMGET', COUNTS, 'pending', 'dead', 'bytes')
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
      if known[id] == nil then known[id] = call('EXISTS', ekey(id)) == 1 end
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
local seq = call('INCRBY', SEQ, added) - added
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
        call('HSET', h, 'id', id, 'meta', e[8], 'body', value, 'size', #value,
          'nst', nst, 'created', e[3], 'grp', grp, 'attempts', e[4], 'err', e[7],
          'changed', e[5], 'state', 'PENDING', 'seq', seq, 'owner', '', 'lease', 0)
        call('ZADD', S_PENDING, seq, id)
        call('ZADD', CREATED, e[3], id)
        if grp == '' then
          call('ZADD', DUE, nst, dmember(seq, id))
        else
          local gk = gkey(grp)
          if call('EXISTS', gk) == 0 then
            call('ZADD', DUE, nst, dmember(seq, id))
            call('SADD', GROUPS, grp)
          end
          call('ZADD', gk, seq, id)
        end
        parts[#parts + 1] = string.format('%d', seq)
      else
        reply[#reply + 1] = call('HGETALL', h)
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
  call('HINCRBY', COUNTS, 'pending', added)
  call('HINCRBY', COUNTS, 'bytes', added_bytes)
end
reply[1] = table.concat(summary, ';')
return done(reply)
"""

# ARGV: key base, now_ms, limit, candidates, lease_until_ms, owner. KEYS: found on the way (the
# due entries, their groups). Looks at the first ``candidates`` P:due members that are due, in
# order, and claims up to ``limit``, stopping at the first one whose keys were not declared (so
# that what a claim returns is the soonest due); the keys of it and of the members after it are
# noted. Result {the claimed entries' HGETALLs, dropped, the keys wanted, nexts, after}: dropped
# counts the members that were no claimable entry (they cannot be, unless the keys were edited
# by hand), removed from P:due rather than claimed; nexts (declared calls) gives per claimed
# entry of a group the member after it (its settlement will need that key), else false; after
# the keys of the members looked at and not claimed, declared or not (the next claim_due
# declares them at once). A claim is never refused for a key it lacks: it claims what it can,
# and outbox.py's claim_due calls again with the keys wanted. An entry taken over an expired
# lease (its owner still set: no outcome was recorded) gets ms = 1: maybe stored.
CLAIM = """
local now, limit, candidates = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local lease_until, owner = ARGV[5], ARGV[6]
local members = call('ZRANGEBYSCORE', DUE, '-inf', now, 'LIMIT', 0, candidates)
local claimed, nexts, after, dropped, blocked = {}, {}, {}, 0, false
for _, member in ipairs(members) do
  if #claimed >= limit then
    -- Declared: the keys of the members after those claimed are noted, for the next claim.
    if LOOSE then break end
    blocked = true
  end
  local id = member_id(member)
  local h = ekey(id)
  local f, gk = nil, nil
  if has(h) then
    f = call('HMGET', h, 'state', 'grp', 'owner')
    if f[1] == 'PENDING' and f[2] ~= '' then gk = gkey(f[2]) end
  end
  if not f or (gk and not has(gk)) then
    blocked = true
  end
  if blocked then
    after[#after + 1] = h
    if gk then after[#after + 1] = gk end
  else
    if f[1] ~= 'PENDING' or (gk and call('ZRANGE', gk, 0, 0)[1] ~= id) then
      call('ZREM', DUE, member)
      dropped = dropped + 1
    else
      if f[3] and f[3] ~= '' then call('HSET', h, 'ms', '1') end
      call('HSET', h, 'owner', owner, 'lease', lease_until)
      call('ZADD', DUE, lease_until, member)
      call('ZADD', LEASES, lease_until, id)
      claimed[#claimed + 1] = call('HGETALL', h)
      -- Declared: the entry that will be its group's head after it, for the settlement's keys.
      nexts[#claimed] = (not LOOSE and gk and call('ZRANGE', gk, 1, 1)[1]) or false
    end
  end
end
return done({claimed, dropped, NEEDED, nexts, after})
"""

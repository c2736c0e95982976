#pragma once
// The server-side half of a Redis job (runtime/redis_source.cpp): the Lua scripts its source runs, each one
// atomic on the server, so what one checks cannot change before it acts, and a retry after a lost reply does
// nothing twice. KEYS and ARGV are named at each script; the hashes they keep are described in
// runtime/redis_group_replies.hpp.

namespace sluice::redis_job {

// XACK; only when that took the entry off the pending list: count it and forget its attempts. A retry after a
// lost reply finds the entry acknowledged already and does nothing. KEYS: stream, stats, attempts, done inputs;
// ARGV: group, entry id, consumer, then ARGV[4]: `done`, or `skipped` for an input done in an earlier run (not counted done again). The first and the
// latest done (server time) give `sluicectl jobs status` its rate. A done input is recorded for the group
// (KEYS[4]: ARGV[5] its identity, ARGV[6] the file's stamp; kept 30 days after the group's latest).
inline constexpr const char* kAckScript = R"(-- sluice: acknowledge a done input
if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 1 then
  redis.call('HINCRBY', KEYS[2], ARGV[4], 1)
  redis.call('HINCRBY', KEYS[2], ARGV[4] .. ':' .. ARGV[3], 1)
  redis.call('HDEL', KEYS[3], ARGV[2])
  if ARGV[4] == 'done' and ARGV[5] ~= '' then
    redis.call('HSET', KEYS[4], ARGV[5], ARGV[6])
    redis.call('EXPIRE', KEYS[4], 2592000)
  end
  if ARGV[4] == 'done' then
    local t = redis.call('TIME')
    local ms = t[1] .. string.format('%03d', math.floor(tonumber(t[2]) / 1000))
    redis.call('HSETNX', KEYS[2], 'first_done_ms', ms)
    redis.call('HSET', KEYS[2], 'last_done_ms', ms)
  end
  return 1
end
return 0)";
// As kAckScript, and the entry goes to the dead letters (XADD) with the reason. KEYS: stream, stats, dead
// letters, attempts; ARGV: group, entry id, consumer, input, reason, attempts, options, options rejected (1/0).
// The dead letter keeps the entry's options (their text) so that a requeue runs the input as asked; options that
// were themselves the reason are marked rejected (a requeue leaves such a letter where it is).
inline constexpr const char* kDeadScript = R"(-- sluice: dead-letter an input
if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 1 then
  local f = {'XADD', KEYS[3], '*', 'input', ARGV[4], 'reason', ARGV[5], 'entry', ARGV[2], 'stream', KEYS[1],
             'group', ARGV[1], 'consumer', ARGV[3], 'deliveries', ARGV[6]}
  if ARGV[7] ~= '' then f[#f + 1] = 'options'; f[#f + 1] = ARGV[7] end
  if ARGV[8] == '1' then f[#f + 1] = 'options_rejected'; f[#f + 1] = '1' end
  redis.call(unpack(f))
  redis.call('HINCRBY', KEYS[2], 'dead', 1)
  redis.call('HINCRBY', KEYS[2], 'dead:' .. ARGV[3], 1)
  redis.call('HDEL', KEYS[4], ARGV[2])
  return 1
end
return 0)";

// An attempt begins (ARGV[2] `run`: the count goes up, stamped with the server's time and the consumer) or was
// left for a retry (`left`). max_deliveries counts these, not deliveries: an entry read ahead by a worker that
// died before starting it was delivered but never attempted. Value: "N MS STATE CONSUMER".
inline constexpr const char* kAttemptScript = R"(-- sluice: count an attempt
local v = redis.call('HGET', KEYS[1], ARGV[1])
local n = 0
if v then n = tonumber(string.match(v, '^(%d+) ')) or 0 end
if ARGV[2] == 'run' then
  n = n + 1
  local t = redis.call('TIME')
  local ms = t[1] .. string.format('%03d', math.floor(tonumber(t[2]) / 1000))
  redis.call('HSET', KEYS[1], ARGV[1], n .. ' ' .. ms .. ' run ' .. ARGV[3])
elseif v then
  redis.call('HSET', KEYS[1], ARGV[1], (string.gsub(v, ' run ', ' left ', 1)))
end
return n)";

// A consumer's heartbeat: when it was last heard from (server time) and the silence allowed it, in ms.
inline constexpr const char* kHeartbeatScript = R"(-- sluice: heartbeat
local t = redis.call('TIME')
redis.call('HSET', KEYS[1], ARGV[1], t[1] .. string.format('%03d', math.floor(tonumber(t[2]) / 1000)) .. ' ' .. ARGV[2])
return 1)";

// Consumers of the group that are dead (no heartbeat for longer than the silence they allowed themselves, nor
// any command for as long) and hold nothing are removed from it (their counts stay in the stats). ARGV: group,
// this consumer (never removed here), this one's claim_idle_s in ms (for a consumer without a heartbeat), the
// margin in ms. Checked and removed in one script: an entry delivered meanwhile cannot be lost with it.
inline constexpr const char* kForgetDeadScript = R"(-- sluice: forget dead consumers that hold nothing
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local gone = 0
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local f = {}
  for i = 1, #c, 2 do f[c[i]] = c[i + 1] end
  if f['pending'] == 0 and f['name'] ~= ARGV[2] then
    local allowed, silent = tonumber(ARGV[3]), f['idle']
    local beat = redis.call('HGET', KEYS[2], f['name'])
    if beat then
      local seen, idle = string.match(beat, '^(%d+) (%d+)$')
      if seen then silent, allowed = now - tonumber(seen), tonumber(idle) end
    end
    if silent > allowed + tonumber(ARGV[4]) and f['idle'] > allowed then
      redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], f['name'])
      redis.call('HDEL', KEYS[2], f['name'])
      gone = gone + 1
    end
  end
end
return gone)";

// A consumer ending cleanly leaves the group if it holds nothing (and takes its heartbeat out).
inline constexpr const char* kLeaveScript = R"(-- sluice: leave the group
redis.call('HDEL', KEYS[2], ARGV[2])
if #redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2]) == 0 then
  redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
  return 1
end
return 0)";

// Before an input's outputs are committed: the entry is still pending on this consumer? Then its idle time is
// reset (XCLAIM JUSTID, the delivery count unchanged), so nobody can take it over for claim_idle_s: the time
// the commit and the acknowledgement have. 0: another consumer took it over, or it was acknowledged elsewhere.
inline constexpr const char* kKeepIfOursScript = R"(-- sluice: keep an entry for its commit if it is still ours
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #p == 1 and p[1][2] == ARGV[3] then
  redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, ARGV[2], 'JUSTID')
  return 1
end
return 0)";

// Trims the job stream below the oldest entry any of its consumer groups still needs: a group's smallest pending
// id, or, with nothing pending, its last delivered id (kept, so the group's position stays an entry). Entries
// below are delivered to every group and acknowledged; pending and undelivered ones are never trimmed. One
// script, so no group delivers or claims between the look and the trim. Ids compare as numbers of any length.
inline constexpr const char* kTrimScript = R"(-- sluice: trim what every group acknowledged
local function before(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  if #am ~= #bm then return #am < #bm end
  if am ~= bm then return am < bm end
  if #as ~= #bs then return #as < #bs end
  return as < bs
end
local keep
for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local f = {}
  for i = 1, #g, 2 do f[g[i]] = g[i + 1] end
  local need = f['last-delivered-id']
  if f['pending'] > 0 then need = redis.call('XPENDING', KEYS[1], f['name'])[2] end
  if not keep or before(need, keep) then keep = need end
end
if not keep then return 0 end
return redis.call('XTRIM', KEYS[1], 'MINID', keep))";

}  // namespace sluice::redis_job

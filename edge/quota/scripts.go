package quota

import "time"

// The Redis scripts that decide and undo admissions atomically, and what
// they answer.

// clockSkew is how far Redis's clock may be behind the edge's before an
// acquire's deadline (the edge's timeout) stops protecting: a script that
// starts later than the timeout plus this, by Redis's clock, does nothing.
const clockSkew = 500 * time.Millisecond

// Script results (first element of the reply).
const (
	resOK = iota
	resBudget
	resConcurrency
	resRate
	resQueued
	resRecords
	resLate           // past its deadline: the edge answered already
	resKeyDayBudget   // the API key's hard daily budget
	resKeyMonthBudget // the API key's hard monthly budget
	resKeyConcurrency
	resKeyRate
)

// refundLua holds the Lua functions the scripts share. refund gives back a
// job's budget reservation (Reserve): the hash field holds
// "<micro>|<total key>|..." (the totals it was added to: the tenant's day,
// its API key's day and month), or "<day key>|<micro>" as edges before API
// key budgets wrote it. unkey gives back a job's API key lease: the
// leasekeys hash names the key's lease set.
const refundLua = `
local function refund(resv, id)
  local v = redis.call('HGET', resv, id)
  if not v then return end
  redis.call('HDEL', resv, id)
  local parts = {}
  for f in string.gmatch(v, '[^|]+') do table.insert(parts, f) end
  local micro, first = tonumber(parts[1]), 2
  if not micro then
    micro, first = tonumber(parts[#parts]), 1
    table.remove(parts)
  end
  for i = first, #parts do
    if redis.call('EXISTS', parts[i]) == 1 then redis.call('DECRBY', parts[i], micro) end
  end
end
local function unkey(lk, id)
  local z = redis.call('HGET', lk, id)
  if z then
    redis.call('ZREM', z, id)
    redis.call('HDEL', lk, id)
  end
end
`

// acquireLua checks every configured limit for n jobs and, only if all
// pass, records each job in the rate window and takes a lease per job. A
// lease counts against both the concurrency limit and the class's queue
// bound: for a synchronous request its one job, for an async batch every
// job, until released or expired.
//
// An async batch's jobs also each take a record entry, counted against
// the tenant's bound on async results kept, until the record expires.
//
// Under a daily budget every job takes a lease too: when one expires
// unreleased (its edge died), its budget reservation is given back.
//
// A request made with an API key is also checked against the key's policy
// (billing/ledger.KeyPolicy, read here): its hard daily and monthly
// budgets, its rate and its concurrency, each job taking an entry in the
// key's own rate window and lease set too.
//
// KEYS: 1 rate zset, 2 lease zset, 3 neurons of the day, 4 records zset,
// 5 reservations hash, 6 key rate zset, 7 key lease zset, 8 key policy
// hash, 9 key's neurons of the day, 10 of the month, 11 leasekeys hash
// ARGV: 1 now ms, 2 rpm (0 = off), 3 window ms, 4 max concurrent (0 = off),
// 5 lease ttl ms, 6 daily budget (0 = off), 7 max queued (0 = off),
// 8 max records (0 = off), 9 record ttl ms, 10 deadline (ms of Redis's
// clock), 11 "1" with an API key, 12.. the jobs' ids (n = #ARGV - 11)
// Reply: {code, retry-after ms (rate limits and records only; -1: never), in use}
//
// A script that runs past its deadline (Redis stalled, and the edge gave up
// and refused the request) changes nothing: the request it would admit was
// answered already.
const acquireLua = refundLua + `
local now = tonumber(ARGV[1])
local rpm = tonumber(ARGV[2])
local window = tonumber(ARGV[3])
local maxc = tonumber(ARGV[4])
local lease = tonumber(ARGV[5])
local budget = tonumber(ARGV[6])
local maxq = tonumber(ARGV[7])
local maxr = tonumber(ARGV[8])
local rttl = tonumber(ARGV[9])
local n = #ARGV - 11
local haskey = ARGV[11] == '1'
local t = redis.call('TIME')
if tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) > tonumber(ARGV[10]) then return {6, 0, 0} end
local track = maxc > 0 or maxq > 0 or budget > 0
if track then
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)) do
    refund(KEYS[5], id)
    unkey(KEYS[11], id)
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
end
if budget > 0 then
  local used = tonumber(redis.call('GET', KEYS[3]) or '0')
  if used >= budget then return {1, 0, 0} end
end
if track then
  local held = redis.call('ZCARD', KEYS[2])
  if maxc > 0 and held + n > maxc then return {2, 0, held} end
  if maxq > 0 and held + n > maxq then return {4, 0, held} end
end
if maxr > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  local kept = redis.call('ZCARD', KEYS[4])
  if kept + n > maxr then
    if n > maxr then return {5, -1, kept} end
    local e = redis.call('ZRANGE', KEYS[4], kept + n - maxr - 1, kept + n - maxr - 1, 'WITHSCORES')
    return {5, tonumber(e[2]) - now, kept}
  end
end
local function windowFull(zset, limit, code)
  redis.call('ZREMRANGEBYSCORE', zset, '-inf', now - window)
  local used = redis.call('ZCARD', zset)
  if used + n <= limit then return nil end
  if n > limit then return {code, -1, used} end
  local k = used + n - limit
  local e = redis.call('ZRANGE', zset, k - 1, k - 1, 'WITHSCORES')
  return {code, tonumber(e[2]) + window - now, used}
end
local krpm = 0
if haskey then
  local p = redis.call('HMGET', KEYS[8], 'rpm', 'concurrency', 'daily', 'monthly', 'soft')
  krpm = tonumber(p[1] or '0') or 0
  local kmaxc = tonumber(p[2] or '0') or 0
  if p[5] ~= '1' then
    local d, m = tonumber(p[3] or '0') or 0, tonumber(p[4] or '0') or 0
    if d > 0 and tonumber(redis.call('GET', KEYS[9]) or '0') >= d then return {7, 0, 0} end
    if m > 0 and tonumber(redis.call('GET', KEYS[10]) or '0') >= m then return {8, 0, 0} end
  end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', now)) do redis.call('HDEL', KEYS[11], id) end
  redis.call('ZREMRANGEBYSCORE', KEYS[7], '-inf', now)
  if kmaxc > 0 then
    local held = redis.call('ZCARD', KEYS[7])
    if held + n > kmaxc then return {9, 0, held} end
  end
  if krpm > 0 then
    local full = windowFull(KEYS[6], krpm, 10)
    if full then return full end
  end
end
if rpm > 0 then
  local full = windowFull(KEYS[1], rpm, 3)
  if full then return full end
  for i = 12, #ARGV do redis.call('ZADD', KEYS[1], now, ARGV[i]) end
  redis.call('PEXPIRE', KEYS[1], window)
end
if track then
  for i = 12, #ARGV do redis.call('ZADD', KEYS[2], now + lease, ARGV[i]) end
  if redis.call('PTTL', KEYS[2]) < lease then redis.call('PEXPIRE', KEYS[2], lease) end
end
if maxr > 0 then
  for i = 12, #ARGV do redis.call('ZADD', KEYS[4], now + rttl, ARGV[i]) end
  if redis.call('PTTL', KEYS[4]) < rttl then redis.call('PEXPIRE', KEYS[4], rttl) end
end
if haskey then
  if krpm > 0 then
    for i = 12, #ARGV do redis.call('ZADD', KEYS[6], now, ARGV[i]) end
    redis.call('PEXPIRE', KEYS[6], window)
  end
  for i = 12, #ARGV do
    redis.call('ZADD', KEYS[7], now + lease, ARGV[i])
    redis.call('HSET', KEYS[11], ARGV[i], KEYS[7])
  end
  if redis.call('PTTL', KEYS[7]) < lease then redis.call('PEXPIRE', KEYS[7], lease) end
  if redis.call('PTTL', KEYS[11]) < lease then redis.call('PEXPIRE', KEYS[11], lease) end
end
return {0, 0, 0}
`

// releaseLua gives back leases (and record entries, for a batch that was
// not queued) and charges the micro-neurons used, once per request id when
// one is given (the claim billing/ledger shares).
//
// Each id's budget reservation and API key lease are given back first.
// The charge goes to the API key's day and month totals too, when the
// request had a key.
//
// KEYS: 1 lease zset, 2 neurons of the admission day, 3 charge claim,
// 4 records zset, 5 reservations hash, 6 leasekeys hash, 7 the key's
// neurons of the day, 8 of the month
// ARGV: 1 micro-neurons (>= 0), 2 ttl ms of the neuron key, 3 "1" when
// KEYS[3] is a claim to take, 4 ttl ms of the claim, 5 "1" when the ids'
// record entries go too, 6 "1" with an API key, 7 ttl ms of the key's
// month, 8.. lease ids
const releaseLua = refundLua + `
for i = 8, #ARGV do
  redis.call('ZREM', KEYS[1], ARGV[i])
  refund(KEYS[5], ARGV[i])
  unkey(KEYS[6], ARGV[i])
end
if ARGV[5] == '1' then
  for i = 8, #ARGV do redis.call('ZREM', KEYS[4], ARGV[i]) end
end
local n = tonumber(ARGV[1])
if n > 0 then
  if ARGV[3] == '1' and not redis.call('SET', KEYS[3], '1', 'NX', 'PX', ARGV[4]) then
    return 0
  end
  redis.call('INCRBY', KEYS[2], ARGV[1])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  if ARGV[6] == '1' then
    redis.call('INCRBY', KEYS[7], ARGV[1])
    redis.call('PEXPIRE', KEYS[7], ARGV[2])
    redis.call('INCRBY', KEYS[8], ARGV[1])
    redis.call('PEXPIRE', KEYS[8], ARGV[7])
  end
end
return 0
`

// releaseJobsLua gives back the leases, API key leases and budget
// reservations of jobs that ended (billing charges what they ran from their
// usage events).
//
// KEYS: 1 lease zset, 2 reservations hash, 3 leasekeys hash; ARGV: the
// jobs' ids
const releaseJobsLua = refundLua + `
for i = 1, #ARGV do
  redis.call('ZREM', KEYS[1], ARGV[i])
  refund(KEYS[2], ARGV[i])
  unkey(KEYS[3], ARGV[i])
end
return 0
`

// reserveLua reserves the worst case of a request's jobs against each
// budget it is under (the tenant's daily budget; its API key's hard daily
// and monthly ones, read from the key's policy), atomically with the check:
// refused when what is charged and reserved already, plus the worst cases
// of all the jobs but the costliest, reaches a budget, so each ends at most
// one job's worst case over.
//
// KEYS: 1 neurons of the day, 2 reservations hash, 3 key policy hash,
// 4 key's neurons of the day, 5 of the month
// ARGV: 1 daily budget (micro; 0 = none), 2 ttl ms of the day keys, 3 ttl
// ms of the hash, 4 "1" with an API key, 5 ttl ms of the month key, then
// pairs: job id, worst case (micro)
// Reply: {code (0 ok, 1 the tenant's day, 2 the key's day, 3 its month),
// charged and reserved before}
const reserveLua = `
local total, most = 0, 0
for i = 6, #ARGV, 2 do
  local w = tonumber(ARGV[i + 1])
  total = total + w
  if w > most then most = w end
end
local under = {}
local function check(key, budget, code, ttl)
  if budget <= 0 then return nil end
  local used = tonumber(redis.call('GET', key) or '0')
  if used + total - most >= budget then return {code, used} end
  table.insert(under, {key, ttl})
  return nil
end
local refused = check(KEYS[1], tonumber(ARGV[1]), 1, ARGV[2])
if refused then return refused end
if ARGV[4] == '1' then
  local p = redis.call('HMGET', KEYS[3], 'daily', 'monthly', 'soft')
  if p[3] ~= '1' then
    refused = check(KEYS[4], tonumber(p[1] or '0') or 0, 2, ARGV[2])
      or check(KEYS[5], tonumber(p[2] or '0') or 0, 3, ARGV[5])
    if refused then return refused end
  end
end
if #under == 0 then return {0, 0} end
local names = {}
for _, u in ipairs(under) do
  redis.call('INCRBY', u[1], total)
  redis.call('PEXPIRE', u[1], u[2])
  table.insert(names, u[1])
end
local held = table.concat(names, '|')
for i = 6, #ARGV, 2 do redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1] .. '|' .. held) end
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return {0, 0}
`

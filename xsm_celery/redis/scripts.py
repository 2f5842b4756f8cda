"""The Lua scripts behind the fleet-wide limiters, slots and breakers.

Each decision is one script, so it is atomic and costs one round trip. Every script reads
the time with ``TIME`` on the Redis server, never the worker's clock, so workers whose clocks
disagree still share one bucket, one set of leases and one cooldown. Redis 7 replicates
scripts by their effects, which is what lets a script that calls ``TIME`` also write.

Every script also stamps the key it decided on into its bucket's fleet index (a sorted set
scored by the last use; the token bucket, the hottest script, restamps it and its own TTL at
most every 10 s), which is how ``xsm-celery breakers`` lists per-customer keys nobody
declared. The keys of one call always share a hash tag (``fleet_store``'s key layout), so
each call runs on one node of a Redis Cluster.

A denied request gets back the moment it should come back, and deferred callers queue up
behind one another instead of all waking at the next token: the token bucket reserves the
token a deferred caller will run on (its level goes below zero by the reservations); the
sliding window and the slot pools, which cannot promise a future place, push a per-key
``tail`` one interval (a window place, a slot's expected turnover) further for each denial.
"""

from __future__ import annotations

__all__ = [
    "BREAKER_CAS",
    "BREAKER_LOAD",
    "CONCURRENCY_ACQUIRE",
    "CONCURRENCY_RELEASE",
    "CONCURRENCY_RENEW",
    "DEFERRAL_NOTE",
    "SLIDING_WINDOW",
    "TOKEN_BUCKET",
]

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

_INDEX = """
redis.call('ZADD', KEYS[#KEYS], now, ARGV[#ARGV])
"""

#: KEYS: bucket hash, index. ARGV: tokens per ms, burst, cost, longest reservation ms (0:
#: never reserve), index member. The rate and burst are stamped beside the level (with the
#: index, at most every 10 s), so a reader can refill the level to the moment it reads.
#: Returns the tokens left (floored) when admitted, a bare integer so the common answer is
#: the cheapest to parse; else {2 reserved | 0 refused, wait_ms, tokens left (floored),
#: now_ms}. A reservation takes the tokens now and lets the level go below zero, so the
#: next caller's wait includes every reservation ahead of it: deferred callers queue up in
#: order, each owning the token it will run on (GCRA-style).
TOKEN_BUCKET = (
    _NOW
    + """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local reserve_max = tonumber(ARGV[4])
local h = redis.call('HMGET', KEYS[1], 'tokens', 'ts', 'seen')
local tokens = tonumber(h[1]) or burst
local ts = tonumber(h[2]) or now
local seen = tonumber(h[3]) or 0
local ttl = math.ceil(burst / rate) + 60000
if now - seen >= 10000 then
    redis.call('ZADD', KEYS[2], now, ARGV[5])
    redis.call('HSET', KEYS[1], 'seen', now, 'rate', ARGV[1], 'burst', ARGV[2])
    redis.call('PEXPIRE', KEYS[1], ttl)
end
if now > ts then tokens = math.min(burst, tokens + (now - ts) * rate) end
if tokens >= cost then
    tokens = tokens - cost
    redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', now)
    return math.floor(tokens)
end
local wait = math.ceil((cost - tokens) / rate)
if reserve_max > 0 and wait <= reserve_max then
    tokens = tokens - cost
    redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', now)
    redis.call('PEXPIRE', KEYS[1], ttl + wait)
    return {2, wait, math.floor(tokens), now}
end
return {0, wait, math.floor(tokens), now}
"""
)

#: KEYS: window zset, tail key, index. ARGV: limit, window ms, member id, cost, spread (1:
#: push the tail for deferred callers, 0: report the bare wait), index member.
#: Returns {allowed, wait_ms, used, now_ms}.
SLIDING_WINDOW = (
    _NOW
    + _INDEX
    + """
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local cost = tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local used = redis.call('ZCARD', KEYS[1])
if used + cost <= limit then
    for i = 1, cost do
        redis.call('ZADD', KEYS[1], now, now .. ':' .. ARGV[3] .. ':' .. i)
    end
    redis.call('PEXPIRE', KEYS[1], window + 1000)
    return {1, 0, used + cost, now}
end
local oldest = redis.call('ZRANGE', KEYS[1], used + cost - limit - 1, used + cost - limit - 1,
    'WITHSCORES')
local due = tonumber(oldest[2]) + window
if ARGV[5] ~= '1' then return {0, due - now, used, now} end
local step = math.ceil(window / limit)
local tail = tonumber(redis.call('GET', KEYS[2])) or 0
if tail + step > due then due = tail + step end
redis.call('SET', KEYS[2], due, 'PX', due - now + window)
return {0, due - now, used, now}
"""
)

#: KEYS: holders zset, meta hash, index. ARGV: holder, fixed limit (0: the AIMD limit in
#: meta, starting at ARGV[4]), lease ms, AIMD initial limit, index member.
#: Returns {allowed, wait_ms, held, limit, now_ms}.
CONCURRENCY_ACQUIRE = (
    _NOW
    + _INDEX
    + """
local lease = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local limit = tonumber(ARGV[2])
if limit == 0 then limit = tonumber(redis.call('HGET', KEYS[2], 'limit')) or tonumber(ARGV[4]) end
local held = redis.call('ZCARD', KEYS[1])
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
    redis.call('ZADD', KEYS[1], now + lease, ARGV[1])
    return {1, 0, held, limit, now}
end
if held < limit then
    redis.call('ZADD', KEYS[1], now + lease, ARGV[1])
    redis.call('PEXPIRE', KEYS[1], lease * 2)
    return {1, 0, held + 1, limit, now}
end
local hold = tonumber(redis.call('HGET', KEYS[2], 'hold_ms')) or math.min(lease, 1000)
local step = math.max(1, math.ceil(hold / limit))
local due = now + step
local tail = tonumber(redis.call('HGET', KEYS[2], 'tail')) or 0
if tail + step > due then due = tail + step end
if due - now > lease then due = now + lease end
redis.call('HSET', KEYS[2], 'tail', due)
return {0, due - now, held, limit, now}
"""
)

#: KEYS: holders zset. ARGV: lease ms, holder... Returns the holders no longer held.
CONCURRENCY_RENEW = (
    _NOW
    + """
local lease = tonumber(ARGV[1])
local lost = {}
for i = 2, #ARGV do
    local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
    if score and tonumber(score) >= now then
        redis.call('ZADD', KEYS[1], now + lease, ARGV[i])
    else
        redis.call('ZREM', KEYS[1], ARGV[i])
        table.insert(lost, ARGV[i])
    end
end
if #lost < #ARGV - 1 then redis.call('PEXPIRE', KEYS[1], lease * 2) end
return lost
"""
)

#: KEYS: holders zset, meta hash. ARGV: holder, held ms, failed (0/1), AIMD on (0/1),
#: initial, min, max, increase, decrease factor, latency target ms, interval ms.
#: Returns {released, limit, now_ms}.
CONCURRENCY_RELEASE = (
    _NOW
    + """
local released = redis.call('ZREM', KEYS[1], ARGV[1])
local held_ms = tonumber(ARGV[2])
local old = tonumber(redis.call('HGET', KEYS[2], 'hold_ms'))
local hold = held_ms
if old then hold = old * 0.8 + held_ms * 0.2 end
redis.call('HSET', KEYS[2], 'hold_ms', tostring(hold))
local limit = 0
if ARGV[4] == '1' then
    limit = tonumber(redis.call('HGET', KEYS[2], 'limit')) or tonumber(ARGV[5])
    local last = tonumber(redis.call('HGET', KEYS[2], 'adjusted_at')) or 0
    if now - last >= tonumber(ARGV[11]) then
        local new = limit
        if ARGV[3] == '1' or held_ms > tonumber(ARGV[10]) then
            new = math.max(tonumber(ARGV[6]), math.floor(limit * tonumber(ARGV[9])))
        else
            new = math.min(tonumber(ARGV[7]), limit + tonumber(ARGV[8]))
        end
        redis.call('HSET', KEYS[2], 'limit', new, 'adjusted_at', now)
        limit = new
    end
end
redis.call('PEXPIRE', KEYS[2], 86400000)
return {released, limit, now}
"""
)

#: KEYS: breaker hash. Returns {state blob or false, rev, now_ms}.
BREAKER_LOAD = (
    _NOW
    + """
local h = redis.call('HMGET', KEYS[1], 'blob', 'rev')
return {h[1], tonumber(h[2]) or 0, now}
"""
)

#: KEYS: breaker hash, index. ARGV: expected rev, blob, leaf, token, index member.
#: Returns {1, new rev, now_ms} on success, {0, blob, rev, now_ms} when someone wrote first.
BREAKER_CAS = (
    _NOW
    + """
local rev = tonumber(redis.call('HGET', KEYS[1], 'rev')) or 0
if rev ~= tonumber(ARGV[1]) then
    return {0, redis.call('HGET', KEYS[1], 'blob'), rev, now}
end
redis.call('HSET', KEYS[1], 'blob', ARGV[2], 'rev', rev + 1, 'leaf', ARGV[3], 'token', ARGV[4])
redis.call('ZADD', KEYS[2], now, ARGV[5])
return {1, rev + 1, now}
"""
)

#: KEYS: the task's deferral hash. ARGV: the record's lifetime in ms. Notes one more
#: deferral; returns {first deferral ms, deferrals, now ms}, all on Redis' clock.
DEFERRAL_NOTE = (
    _NOW
    + """
redis.call('HSETNX', KEYS[1], 'first', now)
local count = redis.call('HINCRBY', KEYS[1], 'count', 1)
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]))
return {tonumber(redis.call('HGET', KEYS[1], 'first')), count, now}
"""
)

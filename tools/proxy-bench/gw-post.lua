-- proxy-bench --gateway: the wrk request script of the gateway comparison.
-- The same requests go to sg-proxy --role router and --role all: small
-- chat completions of BENCH_SESSIONS prompt_cache_key sessions (64), and
-- every BENCH_BIG_EVERY-th request (10; 0: none) one whose system prompt
-- is BENCH_BIG_BYTES bytes (225280, 220 KiB).  The model is BENCH_MODEL
-- ("bench-model" for the router, "acme/bench-model", a public id, for the
-- gateway); the router's trusted headers (x-request-id, x-model,
-- x-input-tokens) are sent to both (the gateway strips and replaces them).
-- With BENCH_TRUSTED=1 (the router targets) the router gets every trusted
-- header a gateway sends it for these bodies, so that its router stage
-- does the work the all role's does: x-routing-key, x-cache-affinity-key
-- (mt:v1:session:<SHA-256 of the session id>, from the file BENCH_AKEYS:
-- "<session id> <hex>" lines), the gateway's token estimates and, as a
-- store hit would give, x-stargate-last-cluster-id: A.  Requests are
-- formatted once, at start.  Prints exact percentiles like post.lua.
local model = os.getenv("BENCH_MODEL") or "bench-model"
local routed = model:gsub("^[^/]*/", "")
local every = tonumber(os.getenv("BENCH_BIG_EVERY") or "10")
local bigb = tonumber(os.getenv("BENCH_BIG_BYTES") or "225280")
local nsess = tonumber(os.getenv("BENCH_SESSIONS") or "64")
local trusted = os.getenv("BENCH_TRUSTED") == "1"
local reqs = {}
local n = 0

local function body(sess, content)
	return '{"model":"' .. model .. '","prompt_cache_key":"bench-' ..
	    sess .. '","messages":[{"role":"user","content":"' .. content ..
	    '"}],"max_tokens":1}'
end

-- "<session id> <hex>" lines of BENCH_AKEYS
local function akeys()
	local t, f = {}, os.getenv("BENCH_AKEYS")
	if f == nil or f == "" then
		return t
	end
	for line in io.lines(f) do
		local sid, hex = line:match("^(%S+) (%x+)$")
		if sid ~= nil then
			t[sid] = hex
		end
	end
	return t
end

-- the gateway's token estimates for the two bodies (sg-proxy --role
-- gateway sends these: x-input-tokens of a captured request)
local TOKENS_SMALL, TOKENS_BIG = "13", "56330"

local function headers(sid, big, ak)
	local h = {
		["Content-Type"] = "application/json",
		["x-request-id"] = "proxy-bench",
		["x-model"] = routed,
		["x-input-tokens"] = "8",
	}
	if trusted then
		h["x-input-tokens"] = big and TOKENS_BIG or TOKENS_SMALL
		h["x-routing-key"] = os.getenv("BENCH_ROUTING_KEY") or "acme"
		assert(ak[sid] ~= nil, "BENCH_AKEYS has no key for " .. sid)
		h["x-cache-affinity-key"] = "mt:v1:session:" .. ak[sid]
		h["x-stargate-last-cluster-id"] = "A"
	end
	return h
end

init = function(args)
	local ak = trusted and akeys() or {}
	local filler = string.rep("lorem ipsum dolor sit amet, ",
	    math.ceil(bigb / 28)):sub(1, bigb)
	local period = every > 0 and every or nsess
	for i = 1, period do
		local sid, b, big
		big = every > 0 and i == period
		if big then
			sid = "big"
			b = body(sid, filler)
		else
			sid = tostring(i % nsess)
			b = body(sid, "Say hello.")
		end
		reqs[i] = wrk.format("POST", nil,
		    headers("bench-" .. sid, big, ak), b)
	end
end

request = function()
	n = n % #reqs + 1
	return reqs[n]
end

done = function(summary, latency, requests)
	local e = summary.errors
	io.write(string.format("RESULT requests=%d duration_us=%d bytes=%d " ..
	    "err_connect=%d err_read=%d err_write=%d err_status=%d " ..
	    "err_timeout=%d p50_us=%d p90_us=%d p99_us=%d max_us=%d " ..
	    "mean_us=%.1f\n",
	    summary.requests, summary.duration, summary.bytes,
	    e.connect, e.read, e.write, e.status, e.timeout,
	    latency:percentile(50), latency:percentile(90),
	    latency:percentile(99), latency.max, latency.mean))
end

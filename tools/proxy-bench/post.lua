-- proxy-bench: the wrk request script.  POSTs one small non-streaming chat
-- completion carrying the routing headers sg-proxy requires (x-request-id,
-- x-model, x-input-tokens), the same request to every target, and prints
-- exact percentiles from wrk's latency histogram in one machine-readable
-- line at the end.  BENCH_MODEL overrides the model id.
local model = os.getenv("BENCH_MODEL") or "bench-model"

wrk.method = "POST"
wrk.body = '{"model":"' .. model .. '","messages":[{"role":"user",' ..
    '"content":"Say hello."}],"max_tokens":1}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["x-request-id"] = "proxy-bench"
wrk.headers["x-model"] = model
wrk.headers["x-input-tokens"] = "8"

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

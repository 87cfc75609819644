-- wrk script for benches/http.sh: POSTs the NDJSON body in $BODY_FILE on
-- every request (keep-alive) and prints the totals the script checks.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/x-ndjson"
local f = assert(io.open(os.getenv("BODY_FILE"), "rb"))
wrk.body = f:read("*a")
f:close()

done = function(summary, latency, requests)
  io.write(string.format("WRK requests=%d non2xx=%d socket_errors=%d duration_us=%d\n",
    summary.requests, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    summary.duration))
end

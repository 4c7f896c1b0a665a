-- wrk script: GET /api/public/v1/calls/{id} over a set of existing call ids.
-- Needs env CALLEVAL_KEY, CALLEVAL_FIRST_ID and CALLEVAL_LAST_ID.
function init(args)
  wrk.headers["Authorization"] = "Bearer " .. os.getenv("CALLEVAL_KEY")
  first = tonumber(os.getenv("CALLEVAL_FIRST_ID"))
  last = tonumber(os.getenv("CALLEVAL_LAST_ID"))
  n = 0
end

function request()
  n = n + 1
  local id = first + (n % (last - first + 1))
  return wrk.format("GET", "/api/public/v1/calls/" .. id)
end

function done(summary, latency, requests)
  io.write(string.format("RESULT requests=%d duration_s=%.2f rps=%.0f p50_ms=%.2f p99_ms=%.2f non2xx=%d socket_errors=%d\n",
    summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end

-- wrk script: GET /api/public/v1/calls/{id} over a set of existing call ids.
-- Needs env CALLEVAL_KEY, and either CALLEVAL_IDS_FILE (one id a line: ids with gaps, as
-- PostgreSQL's sequences leave) or CALLEVAL_FIRST_ID and CALLEVAL_LAST_ID.
function init(args)
  wrk.headers["Authorization"] = "Bearer " .. os.getenv("CALLEVAL_KEY")
  ids = {}
  local file = os.getenv("CALLEVAL_IDS_FILE")
  if file ~= nil and file ~= "" then
    for line in io.lines(file) do
      ids[#ids + 1] = tonumber(line)
    end
  else
    for id = tonumber(os.getenv("CALLEVAL_FIRST_ID")), tonumber(os.getenv("CALLEVAL_LAST_ID")) do
      ids[#ids + 1] = id
    end
  end
  n = 0
end

function request()
  n = n + 1
  return wrk.format("GET", "/api/public/v1/calls/" .. ids[n % #ids + 1])
end

function done(summary, latency, requests)
  io.write(string.format("RESULT requests=%d duration_s=%.2f rps=%.0f p50_ms=%.2f p99_ms=%.2f non2xx=%d socket_errors=%d\n",
    summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end

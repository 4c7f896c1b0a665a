-- wrk script: POST transcript ingests with a unique call_identifier per request.
-- Needs env CALLEVAL_KEY and CALLEVAL_AGENT.
local counter = 0
local thread_id = 0
local threads = {}

function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  thread_id = tid
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["Authorization"] = "Bearer " .. os.getenv("CALLEVAL_KEY")
  prefix = os.getenv("CALLEVAL_RUN") or tostring(os.time())
  agent = os.getenv("CALLEVAL_AGENT")
end

function request()
  counter = counter + 1
  local body = string.format(
    '{"call_identifier":"bench-%s-%d-%d","agent_id":%s,"transcript":[' ..
    '{"role":"AI Assistant","content":"Thank you for calling, how can I help?","start_time":0.4,"end_time":2.6},' ..
    '{"role":"User","content":"I would like to check the balance of my account.","start_time":3.1,"end_time":5.8},' ..
    '{"role":"AI Assistant","content":"Sure, can you confirm your date of birth?","start_time":6.5,"end_time":8.9}' ..
    '],"metadata":{"source":"bench"}}', prefix, thread_id, counter, agent)
  return wrk.format(nil, "/api/public/v1/calls", nil, body)
end

function done(summary, latency, requests)
  local non2xx = summary.errors.status
  io.write(string.format("RESULT requests=%d duration_s=%.2f rps=%.0f p50_ms=%.2f p99_ms=%.2f non2xx=%d socket_errors=%d\n",
    summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, non2xx,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end

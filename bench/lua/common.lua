-- Shared by the load scripts of bench/run (wrk 4.x, LuaJIT).
--
-- Every thread counts the answers that are not right in its own global
-- `bad` (any status but 200, or a body `ok(body)` refuses); done() adds the
-- threads' counts and prints one line for bench/run to read:
--
--   BENCH_RESULT {"requests":..,"duration_us":..,"bad":..,"connect":..,
--                 "read":..,"write":..,"timeout":..,"status":..,
--                 "p50_us":..,"p99_us":..,"max_us":..,"mean_us":..,
--                 "admitted":..}
--
-- (admitted: the threads' global `admitted`, which only refusal.lua counts:
-- requests let through where a refusal was expected.)

local bench = {}
local threads = {}
local next_id = 0

-- Called once per wrk thread, in the setup state.
function bench.setup(thread)
   next_id = next_id + 1
   thread:set("thread_id", next_id)
   table.insert(threads, thread)
end

-- The plain-text test both scripts use: every needle present, no "error" key.
function bench.contains_all(body, needles)
   if body == nil then
      return false
   end
   if string.find(body, '"error"', 1, true) then
      return false
   end
   for _, needle in ipairs(needles) do
      if not string.find(body, needle, 1, true) then
         return false
      end
   end
   return true
end

-- A response() that counts wrong answers with `ok(body)`.
function bench.counter(ok)
   return function(status, headers, body)
      if status ~= 200 or not ok(body) then
         bad = bad + 1
      end
   end
end

function bench.done(summary, latency, requests)
   local total_bad = 0
   local total_admitted = 0
   for _, thread in ipairs(threads) do
      total_bad = total_bad + (thread:get("bad") or 0)
      total_admitted = total_admitted + (thread:get("admitted") or 0)
   end
   local e = summary.errors
   io.write(string.format(
      'BENCH_RESULT {"requests":%d,"duration_us":%d,"bad":%d,"connect":%d,'
      .. '"read":%d,"write":%d,"timeout":%d,"status":%d,'
      .. '"p50_us":%d,"p99_us":%d,"max_us":%d,"mean_us":%d,"admitted":%d}\n',
      summary.requests, summary.duration, total_bad, e.connect, e.read,
      e.write, e.timeout, e.status,
      latency:percentile(50), latency:percentile(99), latency.max,
      latency.mean, total_admitted))
end

-- The JSON-RPC headers every POST carries.
function bench.rpc_headers()
   wrk.method = "POST"
   wrk.headers["Content-Type"] = "application/json"
   wrk.headers["A2A-Version"] = "1.0"
end

return bench

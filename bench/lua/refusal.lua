-- Refusals (issue 23): what one flooding source gets from Beacon.
-- Arguments (after --):
--   429 TAG    SendMessage with a fresh messageId per request, to a Beacon
--              with a small [limits] rate. Right answer: HTTP 429 whose body
--              names "rate_limited". A 200 (a request the bucket let
--              through) is counted as admitted, not as an error.
--   413 SIZE   A POST of SIZE bytes (over [limits] max_body), its
--              Content-Length declaring them, the body sent whole (wrk sends
--              only complete requests). Right answer: HTTP 413 whose body
--              names "too_large", given from the declared length, before the
--              body is read; Beacon then reads and drops the body and keeps
--              the connection.
-- done() prints the BENCH_RESULT line of common.lua plus "admitted".

local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local bench = dofile(dir .. "common.lua")

bench.rpc_headers()
setup = bench.setup

bad = 0
admitted = 0
local kind = "429"
local n = 0
local tag = "run"
local declared = nil

function init(args)
   kind = args[1] or "429"
   if kind == "413" then
      declared = wrk.format(nil, nil, nil, string.rep(" ", tonumber(args[2] or "65537")))
   else
      tag = (args[2] or "run") .. "-" .. tostring(thread_id or 0)
   end
end

function request()
   if declared then
      return declared
   end
   n = n + 1
   local body = string.format(
      '{"jsonrpc":"2.0","id":%d,"method":"SendMessage","params":{"message":'
      .. '{"messageId":"bench-%s-%d","role":"ROLE_USER",'
      .. '"parts":[{"text":"Hello from the benchmark: a small text message."}]}}}',
      n, tag, n)
   return wrk.format(nil, nil, nil, body)
end

function response(status, headers, body)
   if kind == "413" then
      if status ~= 413 or not string.find(body or "", '"too_large"', 1, true) then
         bad = bad + 1
      end
   elseif status == 200 then
      admitted = admitted + 1
   elseif status ~= 429 or not string.find(body or "", '"rate_limited"', 1, true) then
      bad = bad + 1
   end
end

function done(summary, latency, requests)
   bench.done(summary, latency, requests)
end

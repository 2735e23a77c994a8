-- SendMessage over the HTTP+JSON binding: POST <interface URL>/message:send
-- (bench/run passes that URL), a small text message with a fresh messageId
-- per request, as the JSON-RPC script sends it but without the envelope.
-- Right answer: HTTP 200 with a Task in TASK_STATE_SUBMITTED and no error.
-- Argument (after --): a run tag that keeps messageIds unique across cells.

local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local bench = dofile(dir .. "common.lua")

bench.rpc_headers()
setup = bench.setup
done = bench.done

bad = 0
local n = 0
local tag = "run"

function init(args)
   tag = (args[1] or "run") .. "-rest-" .. tostring(thread_id or 0)
end

function request()
   n = n + 1
   local body = string.format(
      '{"message":{"messageId":"bench-%s-%d","role":"ROLE_USER",'
      .. '"parts":[{"text":"Hello from the benchmark: a small text message."}]}}',
      tag, n)
   return wrk.format(nil, nil, nil, body)
end

response = bench.counter(function(body)
   return bench.contains_all(body, { "TASK_STATE_SUBMITTED" })
end)

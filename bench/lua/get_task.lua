-- GetTask of one existing task (bench/run creates it before the cell).
-- Right answer: HTTP 200 naming that task, in TASK_STATE_SUBMITTED, no error.
-- Argument (after --): the task id.

local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local bench = dofile(dir .. "common.lua")

bench.rpc_headers()
setup = bench.setup
done = bench.done

bad = 0
local task_id = nil

function init(args)
   task_id = args[1]
   if task_id == nil then
      io.stderr:write("get_task.lua needs the task id after --\n")
      os.exit(2)
   end
   -- A static request: wrk sends these bytes again and again.
   wrk.body = string.format(
      '{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"%s"}}', task_id)
end

response = bench.counter(function(body)
   return bench.contains_all(body, { '"' .. task_id .. '"', "TASK_STATE_SUBMITTED" })
end)

-- GetTask over the HTTP+JSON binding: GET <interface URL>/tasks/{id} of one
-- existing task (bench/run creates it before the cell and passes that URL).
-- Right answer: HTTP 200 naming that task, in TASK_STATE_SUBMITTED, no error.
-- Argument (after --): the task id.

local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local bench = dofile(dir .. "common.lua")

wrk.method = "GET"
wrk.headers["A2A-Version"] = "1.0"
setup = bench.setup
done = bench.done

bad = 0
local task_id = nil

function init(args)
   task_id = args[1]
   if task_id == nil then
      io.stderr:write("rest_get_task.lua needs the task id after --\n")
      os.exit(2)
   end
end

response = bench.counter(function(body)
   return bench.contains_all(body, { '"' .. task_id .. '"', "TASK_STATE_SUBMITTED" })
end)

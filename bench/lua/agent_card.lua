-- GET of the agent card.
-- Right answer: HTTP 200 with a card body (it names supportedInterfaces).

local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local bench = dofile(dir .. "common.lua")

wrk.method = "GET"
setup = bench.setup
done = bench.done

bad = 0

response = bench.counter(function(body)
   return bench.contains_all(body, { '"supportedInterfaces"' })
end)

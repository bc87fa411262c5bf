-- wrk script: POSTs the JSON bodies of a file (one per line) in turn, each
-- connection starting at its own offset. Usage:
--   wrk -t2 -c64 -d8s --latency -s benches/http/bodies.lua \
--     http://127.0.0.1:8080/v1/datasets/demo/search -- bodies.jsonl
local bodies = {}
local counter = 0

function init(args)
  local path = args[1] or "bodies.jsonl"
  for line in io.lines(path) do
    if #line > 0 then
      bodies[#bodies + 1] = line
    end
  end
  if #bodies == 0 then
    error("no bodies in " .. path)
  end
  counter = math.random(#bodies)
end

function request()
  counter = counter % #bodies + 1
  return wrk.format("POST", nil, { ["Content-Type"] = "application/json" }, bodies[counter])
end

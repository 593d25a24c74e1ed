-- wrk script: POST one Triton inference request (body read from a file), as the HTTP user sends it.
-- TRITONKIT_WRK_BODY: file with the request body; TRITONKIT_WRK_HEADER_LENGTH: its JSON header size
-- (binary tensor extension; empty for a pure-JSON body).
local path = assert(os.getenv("TRITONKIT_WRK_BODY"), "TRITONKIT_WRK_BODY is not set")
local file = assert(io.open(path, "rb"))
local body = file:read("*a")
file:close()
wrk.method = "POST"
wrk.body = body
local header_length = os.getenv("TRITONKIT_WRK_HEADER_LENGTH")
if header_length and header_length ~= "" then
  wrk.headers["Content-Type"] = "application/octet-stream"
  wrk.headers["Inference-Header-Content-Length"] = header_length
else
  wrk.headers["Content-Type"] = "application/json"
end

local failures = 0
response = function(status, headers, body)
  if status ~= 200 then failures = failures + 1 end
end

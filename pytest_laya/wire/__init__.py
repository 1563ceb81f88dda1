"""Layer 1: the protocol, written once, with no I/O: what every server, fake and client stands on.

`questions` (what may be asked), `decision` (answers and the rules they keep), `identity`
(`served_by`, a checkpoint's revision), `health`, `headers` (request ids, trace context,
timings, Retry-After), `problems` (the target's RFC 9457 problems, and reading any server's
error), `requests` (what the target spec refuses in a request), `routes`, `pointer`,
`exchange` and `samples` (varied requests for suites). Imports no pytest, httpx, vcrpy,
starlette or torch (tests/wire/test_layering.py holds it to that).
"""

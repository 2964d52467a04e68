"""Live job events: SSE (``console.streams.sse``) and WebSocket (``console.streams.ws``) streams
fed by one hub per web process (``console.streams.hub``).

Path of an event: whatever inserts a row into jobs_jobevent, the hub of each web process
(or, with REDIS_URL, the one relay of the deployment, ``console.streams.relay``) reads it
with its job by id within about 100 ms of its commit (``console.streams.pgsource``) and
fans it out in memory. Design and figures: docs/streams.md.
"""

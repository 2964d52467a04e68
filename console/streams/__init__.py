"""Live job events: SSE (``console.streams.sse``) and WebSocket (``console.streams.ws``) streams
fed by one hub per web process (``console.streams.hub``).

Path of an event: any INSERT into jobs_jobevent fires a statement-level trigger
(migration 0004) that NOTIFYs the new ids on commit; the hub of each web process (or,
with REDIS_URL, the one relay of the deployment, ``console.streams.relay``) loads them with
their jobs in one query and fans them out in memory. Design and figures: docs/streams.md.
"""

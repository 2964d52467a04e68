"""The ingest run pipeline, driven by four outbox events::

start_ingest ─► IngestRunStarted            (once: a fact for audit and observers)
            └─► NextBatchRequested ─► RunIngester ─► IngesterBatchReady ─► RunHooks
                    ▲                     │                                   │
                    └──── (more data) ────┘            HookBatchCompleted ◄───┘
                                                               │
                                                          PublishBatch
"""

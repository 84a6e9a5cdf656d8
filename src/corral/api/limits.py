"""The API's fixed bounds, in a module light enough for the CLI to import."""

LOG_CHUNK = 1 << 20
"""Most bytes of log one request returns (clients page with ``offset``)."""

MAX_ID = 2**63 - 1
"""The largest id the store's integer columns hold (SQLite INTEGER, SQL BIGINT)."""

MAX_REPORTED = 1e15
"""The largest number a heartbeat may report (steps, throughput, bytes of memory)."""

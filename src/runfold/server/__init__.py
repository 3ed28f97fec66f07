"""`runfold serve`: one long-running owner of a workspace's writer hosting many runs in one event
loop, with an HTTP API (FastAPI) under `/api/` (DESIGN.md §3 one writer, §5 runs, §7 resume).

`owner` hosts the runs (limit, queue, steer, cancel, fork, continue), `events` fans durable
lines out to event streams, `app` is the HTTP API, `process` binds, authenticates and serves.
"""

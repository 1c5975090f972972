"""`dumpcat serve`: the catalog over the PostgreSQL wire protocol (front end).

- `server.py`: the asyncio listener, sessions, login, scheduling of statements and limits;
- `pgwire.py`, `pgcodec.py`: protocol 3 messages and the encoding of Arrow results on the wire;
- `pg_catalog.py`, `pg_translate.py`: the `pg_catalog`/`information_schema` clients ask for, and
  the translation of their queries;
- `statement_worker.py`, `worker_pool.py`, `sandbox.py`: the worker processes that run every
  statement in a contained engine, and the pool that owns them;
- `memory.py`: the server's memory budget.
"""

"""The PostgreSQL engine: many processes on many machines share one DAG
(:class:`~sesstree.store.postgres.backend.PostgresBackend`).

Nothing is imported here: psycopg is an optional extra, loaded only when a store URL needs it.
"""

"""The embedded SQLite engine: one file in WAL mode (:class:`~sesstree.store.sqlite.backend.SqliteBackend`).

Nothing is imported here, so that a reader of one part does not load the engine.
"""

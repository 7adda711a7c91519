"""The repository layer: the one door to a store (:class:`~sesstree.repo.store.Store`) and what it
builds above the storage seam: sessions, revisions, HEAD, the write policy, log, diff and upkeep.

Nothing is imported here, so that reaching one module of the layer does not load the others.
"""

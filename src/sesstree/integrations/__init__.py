"""Adapters that make a sesstree store the storage of other agent frameworks.

Each lives in its own module and needs its framework's extra (``pip install
sesstree[claude-agent-sdk]``); importing this package imports none of them.
"""

__all__: list[str] = []

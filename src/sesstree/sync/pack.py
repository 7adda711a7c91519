"""Nodes on the wire: packed in batches, compressed, and verified by whoever receives them.

A pack is the zlib-compressed msgpack of a list of ``[id, parent, type, data]`` records, ids
and parents as 32 raw bytes (parent nil for a root), ``data`` the node's canonical encoding,
parents before children. The receiver trusts none of it: :func:`verify` recomputes every id
from the bytes, checks that the bytes are the canonical encoding, and that every parent is
stored already or comes earlier in the pack, before anything is written.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Sequence

import msgspec

from ..errors import InvalidEventError, RemoteError
from ..node import NodeId, decode_data, encode_data, node_id_from_encoded
from ..store.base import RawNode

__all__ = [
    "MAX_BODY",
    "MAX_STARTS",
    "MAX_UNPACKED",
    "MAX_WALK",
    "MAX_WALK_IDS",
    "PACK_BYTES",
    "decode_pack",
    "encode_pack",
    "inflate",
    "pack_ids",
    "unpack_ids",
    "verify",
]

#: Largest request body a server reads, compressed (``413`` beyond it).
MAX_BODY = 32 * 1024 * 1024
#: Largest body once decompressed: a small body that inflates past it is refused.
MAX_UNPACKED = 128 * 1024 * 1024
#: A sender cuts its packs at about this many bytes of node data.
PACK_BYTES = 4 * 1024 * 1024
#: Most starts in one /walk request, and most ids listed back from one start.
MAX_STARTS = 20_000
MAX_WALK = 65_536
#: Most ids one /walk answer may hold in all: the sum over its starts of min(LIMIT, MAX_WALK).
MAX_WALK_IDS = 200_000
#: Longest event type a peer may send (registered types are short names).
MAX_TYPE = 200

_encoder = msgspec.msgpack.Encoder()
_Record = tuple[bytes, "bytes | None", str, bytes]
_decoder = msgspec.msgpack.Decoder(list[tuple[bytes, bytes | None, str, bytes]])


def encode_pack(nodes: Iterable[RawNode]) -> bytes:
    """The compressed pack of ``nodes`` (in the order given: parents first)."""
    records = [
        (bytes.fromhex(n.id), None if n.parent is None else bytes.fromhex(n.parent), n.type,
         n.encoded)
        for n in nodes
    ]
    return zlib.compress(_encoder.encode(records), 1)


def inflate(body: bytes, what: str = "body") -> bytes:
    """Decompress a body, refusing one that is not zlib or inflates past MAX_UNPACKED."""
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(body, MAX_UNPACKED)
    except zlib.error as exc:
        raise RemoteError(f"the {what} is not a valid compressed pack ({exc})") from None
    if inflater.unconsumed_tail:
        raise RemoteError(f"the {what} inflates past {MAX_UNPACKED // 2**20} MiB")
    if not inflater.eof:
        raise RemoteError(f"the {what} is cut short")
    return raw


def decode_pack(body: bytes, what: str = "pack") -> list[RawNode]:
    """The records of a pack, shaped as nodes but not yet verified (see :func:`verify`)."""
    try:
        records = _decoder.decode(inflate(body, what))
    except msgspec.DecodeError as exc:
        raise RemoteError(f"the {what} is not a pack of nodes ({exc})") from None
    out = []
    for id_, parent, type_, encoded in records:
        if len(id_) != 32 or (parent is not None and len(parent) != 32):
            raise RemoteError(f"the {what} holds an id that is not 32 bytes")
        out.append(RawNode(NodeId(id_.hex()), None if parent is None else NodeId(parent.hex()),
                           type_, encoded))
    return out


def verify(nodes: Sequence[RawNode], has: Callable[[list[NodeId]], set[NodeId]],
           peer: str) -> None:
    """Refuse (RemoteError, naming the node) a pack with any node whose bytes do not hash to
    its id, are not the canonical encoding of a JSON value, or whose parent is neither in
    ``has`` (the receiving store) nor earlier in the pack."""
    seen: set[NodeId] = set()
    outside: set[NodeId] = set()
    for node in nodes:
        if not node.type or len(node.type) > MAX_TYPE or not node.type.isprintable():
            raise RemoteError(f"{peer} sent node {node.id[:12]} with an invalid event type")
        if node_id_from_encoded(node.parent, node.type, node.encoded) != node.id:
            raise RemoteError(f"{peer} sent node {node.id[:12]} whose bytes do not hash to "
                              "its id: refused, nothing stored")
        try:
            canonical = encode_data(decode_data(node.encoded)) == node.encoded
        except (msgspec.DecodeError, ValueError, TypeError) as exc:
            raise RemoteError(f"{peer} sent node {node.id[:12]} whose data is not "
                              f"msgpack ({exc})") from None
        except InvalidEventError as exc:  # decodes, but to no JSON value the store holds
            # (bytes, NaN, a non-string key, nested past the store's 500 levels): say which.
            raise RemoteError(f"{peer} sent node {node.id[:12]} whose data the store cannot "
                              f"hold ({exc}): refused, nothing stored") from None
        except RecursionError:  # nested past msgspec's limit: no stored node is that deep
            raise RemoteError(f"{peer} sent node {node.id[:12]} whose data is nested too "
                              "deeply: refused, nothing stored") from None
        if not canonical:
            raise RemoteError(f"{peer} sent node {node.id[:12]} whose data is not in "
                              "canonical form: refused, nothing stored")
        if node.parent is not None and node.parent not in seen:
            outside.add(node.parent)
        seen.add(node.id)
    if outside:
        missing = outside - has(sorted(outside))
        if missing:
            first = sorted(missing)[0]
            raise RemoteError(f"{peer} sent a node whose parent {first[:12]} is neither "
                              "stored nor in the pack: refused, nothing stored")


def pack_ids(ids: Iterable[NodeId]) -> bytes:
    """Ids end to end, 32 raw bytes each."""
    return b"".join(bytes.fromhex(i) for i in ids)


def unpack_ids(packed: bytes, what: str = "list of ids") -> list[NodeId]:
    """Inverse of :func:`pack_ids`."""
    if len(packed) % 32:
        raise RemoteError(f"the {what} is not a whole number of 32-byte ids")
    return [NodeId(packed[i : i + 32].hex()) for i in range(0, len(packed), 32)]

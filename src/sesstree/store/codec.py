"""How payloads are compressed at rest: zstd, with a dictionary trained on the store's own
payloads once it holds enough of them.

A node row is stored as its msgpack bytes (type, then payload) or as one zstd frame of them;
a payload stored apart, as one zstd frame of its msgpack. Which one, and with which
dictionary, is said by the row itself (a ``codec`` column): ``None`` is plain msgpack in a node
row, or zlib in a blob row written by format 3 and earlier; ``0`` is a zstd frame made without
a dictionary; ``k > 0`` is a zstd frame made with dictionary ``k`` of the store's ``dicts``
table. Dictionaries are never changed or removed, so a frame can always be read.

Why a dictionary: most payloads are a few hundred bytes of JSON-like text, too short for a
compressor to learn anything from on its own (zstd alone leaves such a payload at 0.9 of its
size); a dictionary trained on a thousand of them carries their keys, roles and common phrases,
and inflating with it is faster than zlib. Frames carry no checksum: every payload is checked
against its node's id (blake3) once inflated, which is stronger.

One :class:`Codec` per connection. Its compression contexts are not thread-safe: frames are
made under the backend's lock (writes), while each thread inflates with contexts of its own
(reads run outside the lock on PostgreSQL, and a server reads from many threads).
"""

from __future__ import annotations

import os
import threading
import zlib
from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any

from blake3 import blake3

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

    import zstandard

__all__ = [
    "BLOB_LIMIT",
    "DICT_SIZE",
    "LEVEL",
    "SETTLED_LEVEL",
    "SMALL_MIN",
    "TRAIN_AFTER",
    "TRAIN_SAMPLES",
    "Codec",
    "CodecError",
    "dict_hash",
    "inflate_ahead",
    "train",
]

#: zstd level: 3 compresses a 2 KB payload about 3x faster than zlib level 6, as tightly.
LEVEL = 3
#: zstd level of a pack compressed again once settled, off the hot path (SQLite's writers at
#: a pause or close, see sqlite/plainpacks.py): 0.93 of level 3's bytes on agent traffic with
#: the dictionary, about 3x its time (3 ms for a pack of 256 messages); inflating is as fast.
SETTLED_LEVEL = 9
#: Payloads shorter than this stay plain: a frame's header would eat what it saves.
SMALL_MIN = 64
#: Payloads written without a dictionary after which a writer trains one (once per store).
TRAIN_AFTER = 1_000
#: The newest payloads a dictionary is trained on (at most; fewer bytes than DICT_SIZE x 4
#: and the dictionary is made smaller).
TRAIN_SAMPLES = 2_000
#: Size of a trained dictionary (bytes); stored once per store.
DICT_SIZE = 64 * 1024
#: A frame that says it inflates past this is damaged (no payload is that large).
BLOB_LIMIT = 1 << 31


def _zstd() -> Any:
    # Imported when a frame is first made or read (~9 ms): a command that reads only plain
    # rows (`sess log -n 20` on an older store, `sess --help`) does not pay for it.
    import zstandard

    return zstandard


class CodecError(Exception):
    """A stored payload cannot be inflated (damage), or names a dictionary that is missing
    or damaged. ``index``: which of the frames given to :meth:`Codec.unpack_all`."""

    index = 0


class Codec:
    """Compression and decompression of payloads for one connection.

    ``load`` returns the bytes of dictionary ``k`` (checked against its hash) or None when the
    store has no such dictionary; it is called once per dictionary, when a frame first needs it.
    ``name_dict``: frames name their dictionary in their header (PostgreSQL rows have no
    column that says it), at the cost of a few bytes each.
    """

    def __init__(self, load: Callable[[int], bytes | None], name_dict: bool = False) -> None:
        self._load = load
        self._name_dict = name_dict
        self._plain_c: zstandard.ZstdCompressor | None = None
        # The dictionaries' bytes, checked (shared: bytes are immutable), and each thread's
        # decompression contexts (a context inflating in two threads at once corrupts its
        # output). ``_generation`` changes when the dictionaries are forgotten.
        self._dict_bytes: dict[int, bytes] = {}
        self._local = threading.local()
        self._generation = 0
        self._compressor: zstandard.ZstdCompressor | None = None
        self._settled: zstandard.ZstdCompressor | None = None
        self._dict_data: Any = None
        #: The dictionary new frames are made with (None: none known yet).
        self.dict_id: int | None = None

    def use(self, dict_id: int, data: bytes) -> None:
        """Make new frames with dictionary ``dict_id`` (whose bytes are ``data``)."""
        z = _zstd()
        d = z.ZstdCompressionDict(data, dict_type=z.DICT_TYPE_FULLDICT)
        self._compressor = z.ZstdCompressor(
            level=LEVEL, dict_data=d, write_checksum=False, write_content_size=True,
            write_dict_id=self._name_dict,
        )
        self._dict_bytes[dict_id] = data
        self._dict_data = d
        self._settled = None
        self.dict_id = dict_id

    def forget(self) -> None:
        """Forget the dictionaries loaded (they are read again when a frame needs one)."""
        self._dict_bytes = {}
        self._generation += 1
        self._compressor = self._settled = self._dict_data = None
        self.dict_id = None

    def pack_settled(self, encoded: bytes) -> tuple[int, bytes] | None:
        """A frame of ``encoded`` made with the dictionary at :data:`SETTLED_LEVEL` (for a
        pack compressed again off the hot path), or None while there is no dictionary."""
        if self.dict_id is None or self._dict_data is None:
            return None
        if self._settled is None:
            self._settled = _zstd().ZstdCompressor(
                level=SETTLED_LEVEL, dict_data=self._dict_data, write_checksum=False,
                write_content_size=True, write_dict_id=self._name_dict,
            )
        return self.dict_id, self._settled.compress(encoded)

    @property
    def _decompressors(self) -> dict[int | str, Any]:
        """This thread's decompression contexts, by codec."""
        local = self._local
        if getattr(local, "generation", None) != self._generation:
            local.generation = self._generation
            local.contexts = {}
        found: dict[int | str, Any] = local.contexts
        return found

    def pack(self, encoded: bytes) -> tuple[int | None, bytes]:
        """A payload kept in its node row: ``(codec, bytes)``, plain when a frame would not
        be smaller (or when no dictionary is known yet: plain zstd saves little there)."""
        if self._compressor is None or len(encoded) < SMALL_MIN:
            return None, encoded
        frame = self._compressor.compress(encoded)
        if len(frame) >= len(encoded):
            return None, encoded
        return self.dict_id, frame

    def pack_blob(self, encoded: bytes) -> tuple[int, bytes]:
        """A payload stored apart: always a frame (an incompressible one grows by a few bytes)."""
        if self._compressor is None:
            if self._plain_c is None:
                self._plain_c = _zstd().ZstdCompressor(
                    level=LEVEL, write_checksum=False, write_content_size=True,
                    write_dict_id=False,
                )
            return 0, self._plain_c.compress(encoded)
        assert self.dict_id is not None
        return self.dict_id, self._compressor.compress(encoded)

    def unpack(self, stored: bytes, codec: int | None, limit: int = BLOB_LIMIT) -> bytes:
        """The payload bytes of a frame (``codec`` None: a zlib blob of format 3)."""
        if codec is None:
            try:
                return zlib.decompress(stored)
            except (zlib.error, TypeError) as exc:
                raise CodecError(f"zlib: {exc}") from None
        d = self._decompressors.get(codec) or self._decompressor(codec)
        z = _zstd()
        try:
            # A damaged header could claim any size: refuse it before allocating it.
            if not 0 <= z.frame_content_size(stored) <= limit:
                raise CodecError("zstd frame of unknown or impossible size")
            out: bytes = d.decompress(stored)
        except (z.ZstdError, TypeError) as exc:
            raise CodecError(f"zstd: {exc}") from None
        return out

    def preload(self, codec: int | None) -> None:
        """Load dictionary ``codec`` now, in this thread, if a frame of it will be inflated in
        another (which then needs no read of the store). Raises CodecError as unpack would."""
        if type(codec) is int and codec > 0 and codec not in self._dict_bytes:
            data = self._load(codec)
            if data is None:
                raise CodecError(f"dictionary {codec} is missing")
            self._dict_bytes[codec] = data

    def unpack_named(self, frame: bytes, limit: int = BLOB_LIMIT) -> bytes:
        """:meth:`unpack` of a frame that names its dictionary in its header."""
        z = _zstd()
        try:
            dict_id = int(z.get_frame_parameters(frame).dict_id)
        except (z.ZstdError, TypeError) as exc:
            raise CodecError(f"zstd: {exc}") from None
        return self.unpack(frame, dict_id, limit)

    def unpack_all(self, frames: list[bytes], codecs: Sequence[int | None], limit: int) -> list[bytes]:
        """:meth:`unpack` of many frames (a path's rows), in one call per dictionary; a
        CodecError says the ``index`` of a frame that cannot be read."""
        first = codecs[0] if codecs else None
        if list(codecs).count(first) == len(codecs):  # (one dictionary: the common case)
            return self._group(frames, first, limit, range(len(frames)))
        groups: dict[int | None, list[int]] = {}
        for i, c in enumerate(codecs):
            groups.setdefault(c, []).append(i)
        out = [b""] * len(frames)
        for c, where in groups.items():
            for i, data in zip(where, self._group([frames[i] for i in where], c, limit, where),
                               strict=True):
                out[i] = data
        return out

    def _group(self, frames: list[bytes], codec: int | None, limit: int,
               where: Sequence[int]) -> list[bytes]:
        """Frames of one codec (``where``: their indexes, for errors)."""
        if codec is not None and frames:
            z = _zstd()
            try:
                d: Any = self._decompressors.get(codec) or self._decompressor(codec)
            except CodecError as exc:
                exc.index = where[0]  # (every frame of the group needs it: name the first)
                raise
            try:
                sizes = list(map(z.frame_content_size, frames))
                if max(sizes) <= limit and min(sizes) >= 0:
                    return [seg.tobytes() for seg in d.multi_decompress_to_buffer(frames)]
            except (z.ZstdError, TypeError, ValueError):
                pass  # damage somewhere: one frame at a time, below, says which
            except (NotImplementedError, AttributeError):
                pass  # zstandard's CFFI backend has no multi_decompress_to_buffer
        return [self._one(f, codec, limit, i) for i, f in zip(where, frames, strict=True)]

    def _one(self, frame: bytes, codec: int | None, limit: int, index: int) -> bytes:
        try:
            return self.unpack(frame, codec, limit)
        except CodecError as exc:
            exc.index = index
            raise

    def _decompressor(self, codec: int) -> zstandard.ZstdDecompressor:
        z = _zstd()
        if type(codec) is not int or codec < 0:  # a damaged codec column
            raise CodecError(f"unknown codec {codec!r}")
        if codec == 0:
            d = z.ZstdDecompressor()
        else:
            data = self._dict_bytes.get(codec)
            if data is None:
                data = self._load(codec)  # (raises CodecError if it fails its hash)
            if data is None:
                raise CodecError(f"dictionary {codec} is missing")
            self._dict_bytes[codec] = data
            try:
                cd = z.ZstdCompressionDict(data, dict_type=z.DICT_TYPE_FULLDICT)
                d = z.ZstdDecompressor(dict_data=cd)
            except z.ZstdError as exc:
                raise CodecError(f"dictionary {codec} is unreadable: {exc}") from None
        self._decompressors[codec] = d
        found: zstandard.ZstdDecompressor = d
        return found


def train(samples: list[bytes], dict_id: int) -> bytes | None:
    """A dictionary trained on ``samples`` (payload bytes), or None if they are too few or
    too alike to train one (the writer tries again later)."""
    total = sum(map(len, samples))
    size = min(DICT_SIZE, total // 4)
    if size < 4096 or len(samples) < 100:
        return None
    z = _zstd()
    try:
        # Fixed cover parameters instead of zstd's search over them: 4x faster to train (27 ms
        # on 2,000 real transcript payloads), the dictionary as good (measured on those).
        d = z.train_dictionary(size, samples, dict_id=dict_id, level=LEVEL, k=1024, d=8, f=18,
                               accel=5)
    except z.ZstdError:
        return None
    data: bytes = d.as_bytes()
    return data


def dict_hash(data: bytes) -> bytes:
    """What a dictionary is checked against when it is loaded."""
    return blake3(data).digest()


#: Below this many compressed bytes the frames of a read are inflated in the reading thread (a
#: hand-off to the second thread costs more than it saves).
AHEAD_MIN = 64 * 1024
_pool: ThreadPoolExecutor | None = None


def _forget_pool() -> None:
    # A forked child has none of its parent's threads: its pool would take work and never do
    # it. It makes its own when it first needs one.
    global _pool
    _pool = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def inflate_ahead(
    codec: Codec, frames: Sequence[tuple[bytes, int | None, int]]
) -> Generator[bytes, None, None]:
    """The frames ``(data, codec, limit)`` of one read (a path's packs) inflated, in order; a
    frame that cannot be read raises CodecError when its turn comes. With more than one and
    enough bytes, a second thread inflates the next frame while the caller decodes this one:
    zstd lets go of the GIL, msgspec does not, so on two cores the two overlap. Each thread
    has its own decompression contexts (see Codec); the dictionaries are loaded here first,
    as the other thread must not read the store (one that cannot be loaded: every frame is
    inflated here, so that the frame that needs it is the one that fails)."""
    global _pool
    ahead = len(frames) > 1 and sum(len(f[0]) for f in frames) >= AHEAD_MIN
    try:
        for how in {f[1] for f in frames} if ahead else ():
            codec.preload(how)
    except CodecError:
        ahead = False
    if not ahead:
        for data, how, limit in frames:
            yield codec.unpack(data, how, limit)
        return
    if _pool is None:
        # (Imported here: it costs a command that reads no long path 5 ms at start-up.)
        from concurrent.futures import ThreadPoolExecutor

        _pool = ThreadPoolExecutor(1, thread_name_prefix="sesstree-inflate")
    pool = _pool
    coming = pool.submit(codec.unpack, *frames[0])
    for k in range(len(frames)):
        current = coming
        if k + 1 < len(frames):
            coming = pool.submit(codec.unpack, *frames[k + 1])
        try:
            yield current.result()
        except GeneratorExit:
            coming.cancel()
            raise

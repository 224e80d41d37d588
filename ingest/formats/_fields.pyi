# Types of the C extension built from _fields.c (see there for what it decides). The buffers are
# numpy arrays: bounds int32, first int64, ok and slow bool, values float64.
from typing import Any

def match_fields(
    chunk: bytes,
    bounds: Any,
    first: Any,
    n_pipes: int,
    befores: tuple[bytes, ...],
    afters: tuple[bytes, ...],
    fixed: tuple[bytes, ...],
    last: bytes,
    ok: Any,
    values: Any,
    slow: Any,
) -> None: ...
def parse_plain(text: bytes) -> float | None: ...
def count_separators(chunk: bytes) -> tuple[int, int]: ...
def split_fields(chunk: bytes, bounds: Any, first: Any, pipes: Any, offsets: Any) -> None: ...
def match_shape(chunk: bytes, bounds: Any, first: Any, shape: bytes, same: Any) -> None: ...

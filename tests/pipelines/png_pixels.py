"""A small PNG reader for the report tests: enough to tell a real picture from a blank or broken one.

Reads what Chromium writes (8-bit RGB or RGBA, not interlaced) and undoes PNG's five row
filters. Not a conftest.py (see payment_fixtures.py). The "up" filter is added a whole row at a
time (bytes as one big integer, seven bits per byte, so no carry crosses a byte); the others go
byte by byte, which for a 1200 x 4000 screenshot takes a couple of seconds.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

SIGNATURE = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True, slots=True)
class Png:
    width: int
    height: int
    channels: int
    rows: list[bytes]

    def pixel(self, x: int, y: int) -> tuple[int, int, int]:
        at = x * self.channels
        r, g, b = self.rows[y][at : at + 3]
        return r, g, b


def read_png(path: Path) -> Png:
    data = path.read_bytes()
    assert data[:8] == SIGNATURE, f"{path} is not a PNG"
    pos, header, chunks = 8, b"", []
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert zlib.crc32(kind + body) == crc, f"{path}: {kind!r} chunk is corrupt"
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            chunks.append(body)
        pos += 12 + length
        if kind == b"IEND":
            break
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
    channels = 3 if colour == 2 else 4
    raw = zlib.decompress(b"".join(chunks))
    stride = width * channels
    assert len(raw) == height * (stride + 1), "image data does not match its header"
    rows: list[bytes] = []
    previous = bytes(stride)
    for y in range(height):
        start = y * (stride + 1)
        line = bytearray(raw[start + 1 : start + 1 + stride])
        previous = _unfilter(raw[start], line, previous, channels)
        rows.append(previous)
    return Png(width, height, channels, rows)


def _add_rows(line: bytes, above: bytes) -> bytes:
    """Byte-wise (line + above) mod 256, a whole row at once."""
    n = len(line)
    low, high = int.from_bytes(b"\x7f" * n, "big"), int.from_bytes(b"\x80" * n, "big")
    a, b = int.from_bytes(line, "big"), int.from_bytes(above, "big")
    return (((a & low) + (b & low)) ^ ((a ^ b) & high)).to_bytes(n, "big")


def _unfilter(kind: int, line: bytearray, above: bytes, bpp: int) -> bytes:
    if kind == 0:
        return bytes(line)
    if kind == 2:
        return _add_rows(line, above)
    n = len(line)
    if kind == 1:
        for i in range(bpp, n):
            line[i] = (line[i] + line[i - bpp]) & 0xFF
    elif kind == 3:
        for i in range(n):
            left = line[i - bpp] if i >= bpp else 0
            line[i] = (line[i] + ((left + above[i]) >> 1)) & 0xFF
    elif kind == 4:
        for i in range(n):
            a = line[i - bpp] if i >= bpp else 0
            b = above[i]
            c = above[i - bpp] if i >= bpp else 0
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
    else:
        raise AssertionError(f"unknown PNG filter {kind}")
    return bytes(line)

"""A dataset's text files (caption files, metadata JSON) as editors save them (torch-free, stdlib only).

UTF-8 is what sd-scripts reads (and all it reads). A byte-order mark says UTF-8, UTF-16 or UTF-32 for sure:
Windows Notepad's "Unicode" is UTF-16 LE with one, so such a file is decoded as it says. A caption file without a
mark that is not UTF-8 is read as Windows-1252 (as Windows editors save text), with a note. What cannot be text the
way it would be trained (NUL characters: UTF-16 or UTF-32 without a mark, or not a text file; bytes that break the
encoding its mark names) is not a caption: its image trains as if it had no caption file.
"""
from __future__ import annotations

import codecs
from dataclasses import dataclass

# UTF-32 LE's mark begins with UTF-16 LE's (FF FE 00 00 / FF FE): the longer one is tried first.
_MARKS: tuple[tuple[bytes, str, str], ...] = (
    (codecs.BOM_UTF32_LE, "utf-32-le", "UTF-32 LE"),
    (codecs.BOM_UTF32_BE, "utf-32-be", "UTF-32 BE"),
    (codecs.BOM_UTF8, "utf-8", "UTF-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le", "UTF-16 LE"),
    (codecs.BOM_UTF16_BE, "utf-16-be", "UTF-16 BE"),
)
NOT_TEXT = "holds NUL characters: it was saved as UTF-16 or UTF-32 without a byte-order mark, or it is not text"


def decode_text(raw: bytes) -> str:
    """`raw` decoded as its byte-order mark says (UTF-8, UTF-16, UTF-32, either byte order; the mark left out),
    else as UTF-8. UnicodeDecodeError when it is not what it says."""
    for mark, codec, _ in _MARKS:
        if raw.startswith(mark):
            return raw[len(mark):].decode(codec)
    return raw.decode("utf-8")


@dataclass(frozen=True)
class CaptionText:
    text: str | None  # None: not a caption (its image trains as if it had no caption file)
    problem: str = ""  # what is wrong with the file ("is not UTF-8 ...", "holds NUL characters ..."); "" if nothing
    read_as: str = ""  # the encoding a file that is not UTF-8 was read as (Windows-1252, Latin-1), with text


def decode_caption(raw: bytes) -> CaptionText:
    """A caption file's text, or why it is none."""
    try:
        text = decode_text(raw)
    except UnicodeDecodeError as err:
        marked = next((name for mark, _, name in _MARKS if raw.startswith(mark)), None)
        if marked:
            return CaptionText(None, f"starts with a {marked} byte-order mark but is not {marked} ({err.reason})")
        if b"\x00" in raw:
            return CaptionText(None, NOT_TEXT)
        problem = f"is not UTF-8 (byte 0x{raw[err.start]:02x} at offset {err.start})"
        try:
            return CaptionText(raw.decode("cp1252"), problem, "Windows-1252")
        except UnicodeDecodeError:  # 0x81, 0x8d, 0x8f, 0x90, 0x9d are not Windows-1252
            return CaptionText(raw.decode("latin-1"), problem, "Latin-1")
    if "\x00" in text:
        return CaptionText(None, NOT_TEXT)
    return CaptionText(text)

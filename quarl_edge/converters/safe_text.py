"""The one way text from outside enters generated C: `safe_text`.

A model's strings (tensor names, custom op names, its description, metadata names) and the
names of the files we read are chosen by whoever made the file. The generator prints them in C
comments, so a name holding `*/`, a backslash-newline (`*\\` newline `/` splices a comment shut),
the trigraph `??/` (a backslash under -std=c99), a quote or a newline could end its comment and
become code. `safe_text` keeps the characters tensor names are made of and writes every other
byte as `%XX` (its hex value, as in a URL), so its result cannot leave a comment or a string
literal: no `*`, `\\`, `?`, `"`, `%` (the escape itself), control character or non-ASCII byte
survives. The names TensorFlow writes (`sequential/dense/MatMul;...:0`) come out unchanged.

tflite_model.py passes every string of the flatbuffer through it as it reads the file, so every
later use (comments, model.json, error messages) sees the safe form; emit.py passes file names
through it, and `check_c` checks the finished source as a whole.
"""
from __future__ import annotations

import re
import string

from ..core.errors import ModelError

SAFE = frozenset(string.ascii_letters + string.digits + " _.-/:;,=+()[]{}<>@#!&|~^'")
_SAFE_BYTES = frozenset(ord(c) for c in SAFE)


def safe_text(text: str | bytes | None) -> str:
    """`text` with every byte outside SAFE written as `%XX` (str: of its UTF-8 encoding)."""
    if text is None:
        return ""
    raw = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else bytes(text)
    if all(b in _SAFE_BYTES for b in raw):
        return raw.decode("ascii")
    return "".join(chr(b) if b in _SAFE_BYTES else f"%{b:02X}" for b in raw)


# Printable ASCII and newlines only; no backslash (no line splice, no escape), no "??" (no
# trigraph), no tab or other control character.
_UNSAFE_C = re.compile(r"[^\x20-\x5b\x5d-\x7e\n]|\?\?")


def check_c(source: str, what: str) -> str:
    """`source` if it is plain printable ASCII without backslashes or trigraphs, else
    ModelError (a second line of defence: everything from outside went through safe_text)."""
    m = _UNSAFE_C.search(source)
    if m is not None:
        line = source.count("\n", 0, m.start()) + 1
        raise ModelError(f"the generated {what} has {m.group()!r} on line {line}: text from the "
                         "model reached it without safe_text")
    return source

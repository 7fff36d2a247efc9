"""Shared helpers for the hand-written parts of the corpus: building tool definitions,
the carriers' encoders, the split rule and the JSON writer."""

import base64
import codecs
import copy
import json
import unicodedata
import urllib.parse

PLACES = ("description", "param_description", "param_name", "enum", "default", "examples",
          "title", "annotations_title")
CLASSES = ("act-outside", "change-arguments", "conceal", "override", "tool-choice",
           "context-request", "encoded")


def split_of(n):
    """The split rule: the n-th entry (1-based) of a class (or of the look-alikes) is
    train when n is odd and dev when n is even. Entries are numbered in the order they are
    written, and neighbours are usually of one wording family, so every family lands on
    both sides."""
    return "train" if n % 2 == 1 else "dev"


def schema(params):
    props, required = {}, []
    for name, sch, req in params:
        props[name] = copy.deepcopy(sch)
        if req:
            required.append(name)
    out = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    return out


def tool(name, description, params=(), title=None, annotations=None):
    t = {"name": name}
    if title is not None:
        t["title"] = title
    t["description"] = description
    t["inputSchema"] = schema(params)
    if annotations is not None:
        t["annotations"] = annotations
    return t


def insert(text, payload, pos):
    """Put payload into text at the start, the end, or between two sentences in the middle."""
    if not text or pos == "only":
        return payload
    if pos == "start":
        return payload + _sep(payload) + text
    if pos == "end":
        return text + _sep(text) + payload
    if pos == "para":  # a paragraph of its own at the end
        return text + "\n\n" + payload
    if pos == "middle":
        cuts = [i + 2 for i in range(len(text) - 2) if text[i] == "." and text[i + 1] == " "]
        cuts += [i + 1 for i in range(len(text) - 1) if text[i] in _CJK_STOPS]
        cuts.sort()
        if not cuts:
            return text + _sep(text) + payload
        cut = cuts[(len(cuts) - 1) // 2]
        return text[:cut] + payload + _sep(payload) + text[cut:]
    raise ValueError(pos)


_CJK_STOPS = "\u3002\uff01\uff1f"  # ideographic full stop, full-width ! and ?


def _sep(before):
    """No space after a CJK sentence end (Japanese and Chinese run sentences together)."""
    return "" if before and before[-1] in _CJK_STOPS else " "


# --- carriers of hidden text -------------------------------------------------------

def tags(s):
    """Unicode tag characters (U+E0000 block): invisible in most renderers."""
    return "".join(chr(0xE0000 + ord(c)) for c in s)


def zw_bits(s):
    """Each byte as 8 zero-width characters (U+200B = 0, U+200C = 1)."""
    return "".join("\u200b" if b == "0" else "\u200c"
                   for ch in s.encode() for b in format(ch, "08b"))


def zw_split(s):
    """Zero-width space between every letter: reads normally, matches no plain keyword."""
    return "\u200b".join(s)


def rlo(s):
    """Right-to-left override: stored reversed, displayed in reading order."""
    return "\u202e" + s[::-1] + "\u202c"


def b64(s):
    return base64.b64encode(s.encode()).decode()


def hexs(s):
    return s.encode().hex()


def rot13(s):
    return codecs.encode(s, "rot13")


def urlenc(s):
    return urllib.parse.quote(s, safe="")


# --- look-alike letters and other plain-sight obfuscations (added 2026-12-07) ----------

_HOMOGLYPHS = {"a": "\u0430", "c": "\u0441", "e": "\u0435", "o": "\u043e", "p": "\u0440",
               "x": "\u0445", "y": "\u0443", "i": "\u0456", "s": "\u0455", "A": "\u0391",
               "B": "\u0392", "E": "\u0395", "H": "\u0397", "I": "\u0399", "K": "\u039a",
               "M": "\u039c", "N": "\u039d", "O": "\u039f", "P": "\u03a1", "T": "\u03a4",
               "X": "\u03a7"}


def homoglyph(s, every=1):
    """Swap Latin letters for Cyrillic and Greek look-alikes (every n-th swappable letter):
    reads the same, matches no plain keyword."""
    out, n = [], 0
    for ch in s:
        if ch in _HOMOGLYPHS:
            n += 1
            if n % every == 0:
                out.append(_HOMOGLYPHS[ch])
                continue
        out.append(ch)
    return "".join(out)


def fullwidth(s):
    """ASCII letters, digits and punctuation as their full-width forms (U+FF01-FF5E)."""
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in s)


_LEET = {"a": "4", "e": "3", "i": "1", "o": "0", "s": "5", "t": "7", "A": "4", "E": "3",
         "I": "1", "O": "0", "S": "5", "T": "7"}


def leet(s):
    return "".join(_LEET.get(c, c) for c in s)


def spaced(s, sep=" "):
    """Letters spaced out: 'i g n o r e   a l l'."""
    return (sep * 3).join(sep.join(w) for w in s.split(" "))


def reverse(s):
    """Plain reversed text (no bidi control: it displays reversed too)."""
    return s[::-1]


def b64_chunks(s, n):
    """The base64 of s cut into n pieces of about equal length, to be spread over a text."""
    e = b64(s)
    k = -(-len(e) // n)
    return [e[i:i + k] for i in range(0, len(e), k)]


# --- writer --------------------------------------------------------------------------

def _escape_invisible(text):
    out = []
    for ch in text:
        cp = ord(ch)
        cat = unicodedata.category(ch)
        if cat in ("Cf", "Cc", "Co", "Cs", "Zl", "Zp") or 0xFE00 <= cp <= 0xFE0F or cp >= 0xE0000:
            if cp > 0xFFFF:
                v = cp - 0x10000
                out.append("\\u%04x\\u%04x" % (0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF)))
            else:
                out.append("\\u%04x" % cp)
        else:
            out.append(ch)
    return "".join(out)


def dumps(obj):
    """One JSON line; readable non-ASCII text stays as it is, invisible and control
    characters are written as \\u escapes."""
    return _escape_invisible(json.dumps(obj, ensure_ascii=False))


def strings_of(value):
    """Every string in a JSON value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from strings_of(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings_of(v)

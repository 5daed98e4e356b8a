"""Long texts tokenized piece by piece, with the ids llama.cpp gives the whole text.

Why: llama.cpp splits special-token texts (`<|im_start|>`) out of a text before BPE
(llama-vocab.cpp, `tokenizer_st_partition`), and for every occurrence it finds it walks its
fragment list from the start (`std::distance` / `std::next` on a `std::forward_list`): a
text holding n special-token texts costs O(n²). Chat content that repeats
`<|im_start|>user\\nx<|im_end|>\\n` 64,000 times (2 MB) kept a server slot busy for ~49 s.

How: the text is cut right after special-token occurrences where llama.cpp's split
certainly ends a fragment, every `CHUNK_BYTES` or so, and each piece is tokenized alone.
A cut after an occurrence S is taken only when no other special-token text (any length, any
kind) overlaps S: then no token llama.cpp tries before S (the longer ones) can take S's
bytes, nothing crosses the cut, and the piece after it starts after a special token, as
the fragment did in the whole text (SentencePiece's space prefix depends on that). Where
the vocabulary has tokens that strip whitespace beside them (LSTRIP / RSTRIP), the bytes
on both sides of S must not be whitespace either. The same machinery gives "plain"
tokenization: special tokens are parsed only outside given spans (message text), which is
how `serve --no-special-in-content` keeps role markers in user content plain text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import llama_cpp

CHUNK_BYTES = 16 * 1024  # a piece is cut at the first safe place after this many bytes
_SPECIAL = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN
_PARSED_ONLY = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN  # skipped without parse_special
_STRIPS = llama_cpp.LLAMA_TOKEN_ATTR_LSTRIP | llama_cpp.LLAMA_TOKEN_ATTR_RSTRIP
_SPACE = frozenset(b" \t\n\v\f\r")  # C isspace() in the "C" locale, what llama.cpp strips

Raw = Callable[[bytes, bool, bool], list[int]]  # one llama_tokenize call: (data, add_special, parse_special)


class Specials:
    """The special-token texts of one vocabulary (llama.cpp's cache_special_tokens: control,
    user-defined and unknown tokens) and a regex that finds the longest one at each place."""

    def __init__(self, ids: dict[bytes, int], parsed_only: set[bytes], strips: bool) -> None:
        self.ids = ids  # text -> token id (the lowest id where texts repeat)
        self.parsed_only = parsed_only  # texts llama.cpp leaves alone without parse_special
        self.strips = strips  # some special token strips the whitespace beside it
        self._single: dict[bytes, list[int]] = {}
        # a lookahead: every position where a special text starts, overlapping ones included
        self._find = re.compile(b"(?=(" + _trie(sorted(ids)) + b"))") if ids else None

    @classmethod
    def of_vocab(cls, vocab: object, n_vocab: int) -> Specials:
        """Read from a llama.cpp vocabulary (one attribute call per token, ~0.1 s for 150k)."""
        ids: dict[bytes, int] = {}
        parsed_only: set[bytes] = set()
        strips = False
        for tok in range(n_vocab):
            attr = llama_cpp.llama_vocab_get_attr(vocab, tok)
            if not attr & _SPECIAL:
                continue
            text = llama_cpp.llama_vocab_get_text(vocab, tok) or b""
            if not text:
                continue
            ids.setdefault(text, tok)
            if attr & _PARSED_ONLY:
                parsed_only.add(text)
            strips = strips or bool(attr & _STRIPS)
        return cls(ids, parsed_only, strips)

    def occurrences(self, data: bytes) -> list[tuple[int, int]]:
        """(start, end) of the longest special text starting at each place, in order."""
        if self._find is None:
            return []
        return [(m.start(), m.end(1)) for m in self._find.finditer(data)]

    def isolated(self, data: bytes, occ: list[tuple[int, int]]) -> list[bool]:
        """For each occurrence: whether llama.cpp's split certainly makes it a token boundary
        on both sides (no other special text overlaps it; whitespace rules where tokens strip)."""
        out = []
        reach = 0  # the farthest end of the occurrences before this one
        for i, (start, end) in enumerate(occ):
            nxt = occ[i + 1][0] if i + 1 < len(occ) else len(data)
            ok = reach <= start and nxt >= end
            if ok and self.strips:
                edges = (data[start], data[end - 1], data[start - 1] if start else 0, data[end] if end < len(data) else 0)
                ok = not any(b in _SPACE for b in edges)
            out.append(ok)
            reach = max(reach, end)
        return out

    def tokenize(self, data: bytes, raw: Raw, *, add_special: bool, parse_special: bool, chunk: int = CHUNK_BYTES) -> list[int]:
        """llama_tokenize(data) in pieces of about `chunk` bytes cut at isolated occurrences
        of special texts that this call parses (the first piece takes add_special)."""
        occ = self.occurrences(data)
        cuts = []
        last = 0
        for (start, end), ok in zip(occ, self.isolated(data, occ), strict=True):
            if ok and end - last >= chunk and end < len(data) and (parse_special or data[start:end] not in self.parsed_only):
                cuts.append(end)
                last = end
        out: list[int] = []
        for i, (a, b) in enumerate(zip([0, *cuts], [*cuts, len(data)], strict=True)):
            out += raw(data[a:b], add_special and i == 0, parse_special)
        return out

    def tokenize_plain(self, data: bytes, spans: Sequence[tuple[int, int]], raw: Raw) -> list[int]:
        """Tokens of `data` where special texts are parsed only outside `spans` (byte ranges):
        inside them a control token's text is plain text, as with parse_special=False.

        Isolated special texts outside the spans are tokens of their own; the stretches between
        them are tokenized with parse_special=False when they hold span bytes, else with it. A
        stretch holding span bytes AND a special text that is not isolated (an overlap, a
        whitespace rule) is tokenized span by span instead: safe, if not byte-exact at the
        span's edges. Span bytes never become a control token either way."""
        inside = _Mask(len(data), spans)
        occ = self.occurrences(data)
        out: list[int] = []
        stretch = 0
        template_special = False  # the current stretch holds a special text outside the spans
        for (start, end), ok in zip(occ, self.isolated(data, occ), strict=True):
            outside = not inside.any(start, end)
            if ok and outside:
                out += self._stretch(data, stretch, start, inside, template_special, raw)
                out += self._alone(data[start:end], raw)
                stretch, template_special = end, False
            elif start >= stretch and not inside.all(start, end):
                template_special = True
        out += self._stretch(data, stretch, len(data), inside, template_special, raw)
        return out

    def _alone(self, text: bytes, raw: Raw) -> list[int]:
        """The token llama.cpp makes of a special text (asked once per text: where two tokens
        share a text, llama.cpp's own order decides, as in a whole text)."""
        got = self._single.get(text)
        if got is None:
            got = self._single[text] = raw(text, False, True)
        return got

    def _stretch(self, data: bytes, a: int, b: int, inside: _Mask, template_special: bool, raw: Raw) -> list[int]:
        if a >= b:
            return []
        if not inside.any(a, b):
            return self.tokenize(data[a:b], raw, add_special=False, parse_special=True)
        if not template_special:
            return self.tokenize(data[a:b], raw, add_special=False, parse_special=False)
        out: list[int] = []
        for x, y, is_span in inside.pieces(a, b):
            out += self.tokenize(data[x:y], raw, add_special=False, parse_special=not is_span)
        return out


class _Mask:
    """Which bytes lie inside the spans (a bytearray: linear to build, C-speed to query)."""

    def __init__(self, n: int, spans: Sequence[tuple[int, int]]) -> None:
        self.bits = bytearray(n)
        for a, b in spans:
            self.bits[a:b] = b"\x01" * (b - a)

    def any(self, a: int, b: int) -> bool:
        return self.bits.find(1, a, b) >= 0

    def all(self, a: int, b: int) -> bool:
        return self.bits.find(0, a, b) < 0

    def pieces(self, a: int, b: int) -> list[tuple[int, int, bool]]:
        """[a, b) as runs of (start, end, inside)."""
        out = []
        while a < b:
            flag = self.bits[a]
            nxt = self.bits.find(1 - flag, a, b)
            nxt = b if nxt < 0 else nxt
            out.append((a, nxt, bool(flag)))
            a = nxt
        return out


def _trie(words: list[bytes]) -> bytes:
    """A regex matching the longest of `words` at a place: a trie of alternations whose
    children come before the end-here option, so backtracking tries longer words first."""
    root: dict = {}
    for w in words:
        node = root
        for byte in w:
            node = node.setdefault(byte, {})
        node[None] = {}
    return _node(root)


def _node(node: dict) -> bytes:
    branches = []
    for byte in sorted(k for k in node if k is not None):
        lit, child = bytes([byte]), node[byte]
        while len(child) == 1 and None not in child:  # a chain without choices: one literal
            (nb, child), = child.items()
            lit += bytes([nb])
        branches.append(re.escape(lit) + _node(child))
    if not branches:
        return b""
    group = b"(?:" + b"|".join(branches) + b")"
    return group + b"?" if None in node else group

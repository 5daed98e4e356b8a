"""Fill-in-the-middle prompts from the model's own FIM tokens, as llama-server builds them.

A FIM model (Qwen2.5-Coder, StarCoder, CodeLlama...) was trained on documents cut as
`<PRE>prefix<SUF>suffix<MID>middle`: given the text before and after the cursor it writes
what goes between. The GGUF names the ids (`tokenizer.ggml.fim_pre/suf/mid/pad/rep/sep`,
llama.cpp's `llama_vocab_fim_*`); a model without them cannot fill in and is refused
(FimUnsupportedError), never handed a prompt it was not trained on.

`build_infill` mirrors llama-server's `format_prompt_infill` (tools/server/server-common.cpp)
token for token, so an editor gets the same prompt and the same answer from either server,
and bench fim compares like with like. The repository-level pattern (Qwen2.5-Coder, arXiv
2409.12186):

    [REP]myproject\\n [SEP]filename0\\n chunk0 ... [SEP]filename\\n [PRE]prefix [SUF]suffix [MID]prompt

(a model without REP/SEP gets chunks behind a plain-text `--- snippet ---` separator) and the
same budget when the context is short: the prefix keeps its last 3/4 x n_batch tokens, the
suffix its first n_batch/4 - 2 - len(prompt), and the extra chunks fill what remains of
n_ctx - n_batch - 2 x n_predict, the most recent (last) tokens kept. llama-server's n_batch
is its `-b` (2048 by default); localspec's `--batch` sizes its decodes (512 by default), not
its prompts, so the budget is `fim_budget`: llama-server's default wherever the context
holds it twice, so that an editor gets the same prompt from both servers. (With 512, the
prefix kept only its last 384 tokens: every typed character slid that window, and a
follow-up request re-evaluated the whole prefix instead of the few tokens typed.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import llama_cpp

from localspec.errors import LocalspecError
from localspec.session import FimInput

NULL = -1  # LLAMA_TOKEN_NULL
REPO_NAME = "myproject\n"  # llama-server's fixed project name (its TODO: make it an input)
CURRENT_FILE = "filename\n"  # and the current file's fixed name
# llama-server's chunk separator for models without a file-separator token
SNIPPET = "\n\n--- snippet ---\n\n"

Tokenize = Callable[[str], list[int]]


class FimUnsupportedError(LocalspecError):
    """The model has no fill-in-the-middle tokens (names the missing ones)."""


@dataclass(frozen=True)
class FimTokens:
    """The vocabulary's FIM token ids (NULL = -1 where the model has none)."""

    pre: int = NULL
    suf: int = NULL
    mid: int = NULL
    pad: int = NULL
    rep: int = NULL
    sep: int = NULL

    @classmethod
    def of_vocab(cls, vocab: object) -> FimTokens:
        """Read from a llama_vocab pointer (the GGUF's tokenizer.ggml.fim_* keys)."""
        return cls(*(int(f(vocab)) for f in (
            llama_cpp.llama_vocab_fim_pre, llama_cpp.llama_vocab_fim_suf, llama_cpp.llama_vocab_fim_mid,
            llama_cpp.llama_vocab_fim_pad, llama_cpp.llama_vocab_fim_rep, llama_cpp.llama_vocab_fim_sep)))

    @property
    def missing(self) -> list[str]:
        """The tokens infill needs and the model lacks (llama-server's check: pre, suf, mid)."""
        return [name for name in ("pre", "suf", "mid") if getattr(self, name) == NULL]

    def require(self, model_name: str) -> None:
        if self.missing:
            raise FimUnsupportedError(
                f"{model_name} has no fill-in-the-middle tokens (missing: "
                f"{', '.join('fim_' + m for m in self.missing)}); use a FIM model such as qwen2.5-coder")


SERVER_BATCH = 2048  # llama-server's default -b: the budget its format_prompt_infill uses


def fim_budget(n_batch: int, n_ctx: int) -> int:
    """The n_batch to budget a FIM prompt with: llama-server's default (2048) when the context
    holds twice that, else half the context; never below the decode batch (`--batch`)."""
    return max(n_batch, min(SERVER_BATCH, n_ctx // 2))


def build_infill(fim: FimTokens, tokenize: Tokenize, inp: FimInput, *, n_batch: int, n_predict: int,
                 n_ctx: int, bos: int | None = None, spm: bool = False) -> list[int]:
    """The prompt token ids (llama-server's format_prompt_infill; `tokenize` is plain text,
    no BOS and no special tokens parsed; `bos` the id to put first, None for none; `spm`
    llama-server's --spm-infill: suffix before prefix)."""
    extra: list[int] = []
    if fim.rep != NULL:
        extra += [fim.rep, *tokenize(REPO_NAME)]
    for chunk in inp.extra:
        if fim.sep != NULL:
            extra += [fim.sep, *tokenize(chunk.get("filename", "tmp") + "\n")]
        else:
            extra += tokenize(SNIPPET)
        extra += tokenize(chunk.get("text", ""))
    if fim.sep != NULL:
        extra += [fim.sep, *tokenize(CURRENT_FILE)]

    prompt = tokenize(inp.prompt) if inp.prompt else []
    prefix, suffix = tokenize(inp.prefix), tokenize(inp.suffix)
    n_prefix = min(len(prefix), 3 * (n_batch // 4))
    n_suffix = min(len(suffix), max(0, n_batch // 4 - (2 + len(prompt))))
    n_extra = min(max(0, n_ctx - n_batch - 2 * n_predict), len(extra))

    head = [fim.pre, *prefix[len(prefix) - n_prefix:], *prompt]
    tail = [fim.suf, *suffix[:n_suffix]]
    first, second = (tail, head) if spm else (head, tail)
    out = extra[len(extra) - n_extra:] if n_extra else []
    if bos is not None:
        out.append(bos)
    return [*out, *first, *second, fim.mid]



def model_infill(model: object, name: str, inp: FimInput, *, n_batch: int, n_ctx: int, n_predict: int) -> list[int]:
    """`build_infill` with a loaded model's FIM tokens, plain-text tokenizer and BOS, budgeted
    like llama-server (fim_budget); a model without FIM tokens raises FimUnsupportedError."""
    m: Any = model
    m.fim.require(name)
    return build_infill(m.fim, lambda t: m.tokenize(t, add_special=False, parse_special=False), inp,
                        n_batch=fim_budget(n_batch, n_ctx), n_predict=n_predict, n_ctx=n_ctx,
                        bos=m.bos if m.add_bos and m.bos >= 0 else None)

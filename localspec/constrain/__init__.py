"""Constrained decoding: the output must match a grammar, a regex or a JSON schema.

Built on llguidance (guidance-ai, MIT): an Earley parser over a lazily built lexer that
computes the set of allowed tokens of a 150k vocabulary in tens of microseconds (measured on
the 2-core machine, median mask() over 200 JSON positions: 13 µs on SmolLM2's 49k tokens,
21-39 µs on Qwen2.5's 152k), so a mask per drafted position costs far less than the decode
it guards. It is what vLLM and SGLang
use for structured output and what llama.cpp itself can link (`LLAMA_LLGUIDANCE`), so a
grammar behaves here as it does there; it reads Lark, JSON schema and regex, and llama.cpp's
GBNF through its converter. (llama.cpp's built-in GBNF sampler lives in its sampler chain,
which localspec does not use: rows are sampled in numpy, drafts are checked token by token,
and branches need a matcher that forks and rolls back.)

This room knows nothing of llama.cpp: the vocabulary comes in as llguidance's tokenizer,
built once per model file by `localspec.backend.grammar.ll_tokenizer` (with the model's
end-of-generation ids from `backend.grammar.eog_ids`).

    spec = ConstraintSpec("json_schema", schema_text)        # checks it: ConfigError, one line
    c = Constraint(spec, ll_tokenizer(model), model.n_vocab, eog_ids(model))
    m = c.matcher()                                           # one per live sequence
    m.mask(); m.allowed(t); m.valid_prefix(draft); m.consume(accepted); m.rollback(n); m.fork()
"""

from localspec.constrain.matcher import Constraint, Matcher
from localspec.constrain.spec import KINDS, ConstraintSpec, Trigger

__all__ = ["KINDS", "Constraint", "ConstraintSpec", "Matcher", "Trigger"]

"""Exact speculative-decoding verifiers (pure numpy; never imports llama_cpp).

    from localspec.verify import VERIFIERS, NumpyRNG
    d = VERIFIERS["mdbv"](NumpyRNG(seed), p, q, x)    # -> Decision(k, tau, token)

p: (K, L+1, V) target rows along each draft (row L = bonus), q: (K, L, V) draft rows,
x: (K, L) draft tokens; rows may be float32 or float64, full-vocabulary or compacted to the
union of supports (compacted is what makes a call cheap). All randomness goes through
rng.flip / rng.choose. Every verifier takes `greedy=None|True|False` (temperature-0 fast
path, see `greedy`).

| name         | drafts | lossless | notes                                                  |
|--------------|--------|----------|--------------------------------------------------------|
| sd           | 1      | yes      | token-level speculative sampling                        |
| gbv          | 1      | yes      | block verification, optimal for one draft               |
| spectr       | K      | yes      | SpecTr K-SEQ over the draft tree                         |
| mdbv         | K      | yes      | select a draft, block-verify it; >= spectr, = gbv at K=1 |
| rrs          | K      | yes      | recursive rejection, each draft its own q (mixed proposers) |
| spectr-gbv   | K >= 2 | NO       | published rule, for reproduction (K=1: exact only with  |
|              |        |          | Algorithm 2, tests/support/algorithm2.py; the engine offers gbv) |
"""

from __future__ import annotations

from collections.abc import Callable

from localspec.verify.common import Decision
from localspec.verify.gbv import gbv
from localspec.verify.greedy import decide_from_argmax, is_one_hot
from localspec.verify.mdbv import mdbv
from localspec.verify.rng import RNG, NumpyRNG
from localspec.verify.rrs import rrs
from localspec.verify.sd import sd
from localspec.verify.spectr import spectr
from localspec.verify.spectr_gbv import spectr_gbv

Verifier = Callable[..., Decision]

VERIFIERS: dict[str, Verifier] = {
    "sd": sd,
    "gbv": gbv,
    "spectr": spectr,
    "spectr-gbv": spectr_gbv,
    "mdbv": mdbv,
    "rrs": rrs,
}

# Rules whose output law equals the target's exactly (proved by enumeration in the tests).
LOSSLESS: frozenset[str] = frozenset({"sd", "gbv", "spectr", "mdbv", "rrs"})

__all__ = [
    "VERIFIERS",
    "LOSSLESS",
    "RNG",
    "Decision",
    "NumpyRNG",
    "Verifier",
    "decide_from_argmax",
    "is_one_hot",
]

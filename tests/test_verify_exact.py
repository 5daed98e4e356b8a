"""Exact-enumeration proofs for the verifiers (docs/algorithms.md#exactness).

Every K-tuple of drafts of tiny context-dependent models is enumerated, every random branch
of the verifier is explored (localspec.verify.exact), and the resulting exact law of the
emitted text is compared with the target's. Run with -s to see the E[tau] table.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, replace

import numpy as np
import pytest

from localspec.verify import VERIFIERS, Decision
from tests.support import exact as E

LOSSLESS = ("sd", "gbv", "spectr", "mdbv", "rrs")
TOY_T, TOY_D = E.const_model([1 / 3, 2 / 3]), E.const_model([2 / 3, 1 / 3])


@dataclass(frozen=True)
class Case:
    kind: str  # "toy", "dir<alpha>", "onehot", "zeros", "disjoint", "pointmass"
    V: int
    L: int
    K: int
    seed: int = 0

    @property
    def name(self) -> str:
        return f"{self.kind}-V{self.V}L{self.L}K{self.K}s{self.seed}"


def _cases() -> list[Case]:
    out = [Case("toy", 2, 2, K) for K in (1, 2, 3)] + [Case("toy", 2, 3, 2)]
    for V in (2, 3):
        for L in (1, 2, 3):
            for K in (1, 2, 3):
                tuples = V ** (L * K)
                if tuples > 729:
                    continue
                if tuples <= 81:  # cheap: every alpha, two seeds
                    out += [Case(f"dir{a}", V, L, K, s) for a in (0.3, 1.0, 3.0) for s in (0, 1)]
                else:  # 512-729 tuples: one alpha each, rotating
                    a = (0.3, 1.0, 3.0)[(V + L + K) % 3]
                    out.append(Case(f"dir{a}", V, L, K, 2))
    out += [Case("onehot", 3, 2, K, 5) for K in (1, 2, 3)]
    out += [Case("zeros", 3, 2, K, 6) for K in (1, 2)]
    out += [Case("zeros", 3, 1, 3, 7), Case("zeros", 3, 3, 1, 7)]
    out += [Case("disjoint", 3, 2, K, 8) for K in (1, 2)]
    # a prompt lookup's draft (decode/drafters/lookup.py): a point mass that depends on the context,
    # K identical copies of it when several drafts are asked for
    out += [Case("pointmass", V, L, K, 9 + V) for V in (2, 3) for L in (1, 2, 3) for K in (1, 2, 3)]
    return out


CASES = _cases()


@functools.cache
def models(case: Case) -> tuple[E.Model, E.Model]:
    if case.kind == "toy":
        return TOY_T, TOY_D
    # K is not part of the seed: the K = 1, 2, 3 cases share one model, so the single-draft
    # rules and the multi-draft rules are compared on the same target/draft pair
    g = np.random.default_rng(1000 * case.seed + 100 * case.V + 10 * case.L)
    V, L = case.V, case.L
    if case.kind.startswith("dir"):
        a = float(case.kind[3:])
        return E.dirichlet_model(V, L, g, a), E.dirichlet_model(V, L, g, a)
    if case.kind == "onehot":
        return E.onehot_model(V, L, g), E.dirichlet_model(V, L, g, 1.0)
    if case.kind == "pointmass":  # a sampled target, a deterministic (lookup) draft
        return E.dirichlet_model(V, L, g, 1.0), E.onehot_model(V, L, g)
    if case.kind == "zeros":
        return E.zeros_model(V, L, g), E.zeros_model(V, L, g)
    if case.kind == "disjoint":  # target never says 0, the draft never says 1 (both ways)

        def masked(zero: int) -> E.Model:
            def row() -> np.ndarray:
                r = g.dirichlet(np.ones(V))
                r[zero] = 0.0
                return r / r.sum()

            return E.table_model(V, L, row)

        return masked(0), masked(1)
    raise ValueError(case.kind)


def law(name: str, case: Case) -> E.Law:
    if name in ("sd", "gbv"):  # single-draft rules: draft 0 only, enumerate K = 1
        case = replace(case, K=1)
    return _law(name, case)


@functools.cache
def _law(name: str, case: Case) -> E.Law:
    tgt, drf = models(case)
    return E.step_law(VERIFIERS[name], tgt, drf, case.V, case.L, case.K)


def etau(name: str, case: Case) -> float:
    return E.expected_tau(law(name, case))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
@pytest.mark.parametrize("name", LOSSLESS)
def test_strictly_lossless(name: str, case: Case) -> None:
    tgt, _ = models(case)
    lw = law(name, case)
    assert abs(sum(lw.values()) - 1.0) < 1e-12
    assert E.strict_error(lw, tgt, case.V, case.L) < 1e-10
    assert E.completability_excess(lw, tgt, case.V, case.L) < 1e-10


@pytest.mark.parametrize("case", [c for c in CASES if c.K == 1], ids=lambda c: c.name)
def test_closed_forms_match_enumeration(case: Case) -> None:
    tgt, drf = models(case)
    assert etau("sd", case) == pytest.approx(E.expected_tau_sd(tgt, drf, case.V, case.L), abs=1e-12)
    assert etau("gbv", case) == pytest.approx(
        E.expected_tau_gbv(tgt, drf, case.V, case.L), abs=1e-12
    )


def test_toy_regression_values() -> None:
    toy = {K: Case("toy", 2, 2, K) for K in (1, 2, 3)}
    assert etau("sd", toy[1]) == pytest.approx(10 / 9, abs=1e-12)
    assert etau("gbv", toy[1]) == pytest.approx(11 / 9, abs=1e-12)
    assert etau("mdbv", toy[2]) == pytest.approx(1.4795606, abs=1e-7)
    assert etau("mdbv", toy[3]) == pytest.approx(1.6429149, abs=1e-7)
    # The design notes quoted SpecTr as 1.4054870 / 1.5933060 (docs/algorithms.md#toy); the
    # exact rho* gives 1.40548655 / 1.59330636: equal to the quoted digits within 1e-6.
    assert etau("spectr", toy[2]) == pytest.approx(1.4054870, abs=1e-6)
    assert etau("spectr", toy[3]) == pytest.approx(1.5933060, abs=1e-6)
    assert etau("spectr", toy[2]) == pytest.approx(1.4054865457, abs=1e-9)
    assert etau("spectr", toy[3]) == pytest.approx(1.5933063621, abs=1e-9)
    # K = 1: MDBV is GBV and SpecTr is token-level SD
    assert etau("mdbv", toy[1]) == pytest.approx(11 / 9, abs=1e-12)
    assert etau("spectr", toy[1]) == pytest.approx(10 / 9, abs=1e-12)


def test_mdbv_dominates_gbv_and_spectr_everywhere() -> None:
    """mdbv >= max(gbv on one draft, spectr on the same K drafts); prints the E[tau] table
    (with the biased spectr-gbv and its strict error for reference)."""
    rows, worst = [], np.inf
    for case in CASES:
        sd_, gbv_ = etau("sd", case), etau("gbv", case)
        sp, md = etau("spectr", case), etau("mdbv", case)
        sg = law("spectr-gbv", case)
        sg_err = E.strict_error(sg, models(case)[0], case.V, case.L)
        worst = min(worst, md - max(gbv_, sp))
        rows.append(
            f"| {case.name} | {sd_:.4f} | {gbv_:.4f} | {sp:.4f} | {md:.4f} "
            f"| {E.expected_tau(sg):.4f} | {sg_err:.1e} |"
        )
        assert md >= max(gbv_, sp) - 1e-12, case.name
    print("\n| case | sd | gbv (1 draft) | spectr | mdbv | spectr-gbv | its strict error |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(f"min mdbv - max(gbv, spectr) = {worst:.3e} over {len(CASES)} cases")


def test_multi_draft_helps_on_toy() -> None:
    """More drafts must help the multi-draft rules on the toy (a sanity check on the walk)."""
    for name in ("spectr", "mdbv"):
        e = [etau(name, Case("toy", 2, 2, K)) for K in (1, 2, 3)]
        assert e[0] < e[1] < e[2]


# -- the harness has teeth ------------------------------------------------------------------
def _sd_correction_from_p(rng, p, q, x, **_):
    """Biased on purpose: token-level SD whose correction is drawn from p, not (p - q)+."""
    for i, t in enumerate(x[0].tolist()):
        if not rng.flip(min(1.0, p[0, i, t] / q[0, i, t])):
            return Decision(0, i, rng.choose(p[0, i]))
    return Decision(0, x.shape[1], rng.choose(p[0, -1]))


def _best_draft_then_gbv(rng, p, q, x, **_):
    """Biased on purpose: pick the draft with the largest target joint, then block-verify it
    against q as if it were an ordinary draft (the selected draft is not distributed as q)."""
    joints = [np.prod([p[k, i, t] for i, t in enumerate(x[k].tolist())]) for k in range(x.shape[0])]
    k = int(np.argmax(joints))
    d = VERIFIERS["gbv"](rng, p[k : k + 1], q[k : k + 1], x[k : k + 1], greedy=False)
    return Decision(k, d.tau, d.token)


@pytest.mark.parametrize("rule", [_sd_correction_from_p, _best_draft_then_gbv])
def test_biased_rules_fail_the_strict_check(rule) -> None:
    case = Case("dir1.0", 2, 2, 2, 0)
    tgt, drf = models(case)
    lw = E.step_law(rule, tgt, drf, case.V, case.L, case.K)
    assert abs(sum(lw.values()) - 1.0) < 1e-12  # a proper law ...
    assert E.strict_error(lw, tgt, case.V, case.L) > 1e-3  # ... and visibly not the target's


def test_deferred_token_expansion_is_exact() -> None:
    """The harness's shortcut (expand an uninspected final token without re-running) gives
    the same law as branching on it like any other draw."""
    case = Case("dir1.0", 3, 2, 2, 1)
    tgt, drf = models(case)
    for name in VERIFIERS:
        fast = E.step_law(VERIFIERS[name], tgt, drf, case.V, case.L, case.K)
        slow_enum = functools.partial(E.enumerate_outputs, defer=False)
        blocks = [(0, 1), (2, 2)]
        p = np.stack([E.block_rows(tgt, drf, b)[0] for b in blocks])
        q = np.stack([E.block_rows(tgt, drf, b)[1] for b in blocks])
        x = np.array(blocks)
        a = E.enumerate_outputs(VERIFIERS[name], p, q, x)
        b = slow_enum(VERIFIERS[name], p, q, x)
        assert a.keys() == b.keys() and all(abs(a[z] - b[z]) < 1e-15 for z in a), name
        assert abs(sum(fast.values()) - 1.0) < 1e-12



DYN_CASES = [Case(f"dir{a}", V, L, K, s) for (V, L) in ((2, 3), (3, 2)) for K in (1, 2) for a in (0.3, 1.0) for s in (0, 1)]


def _dynamic_law(name: str, case: Case) -> tuple[E.Law, int]:
    """Law under auto's length rule (the best draft's confidence product against a cut-off)
    and how often the rule ended a draft before L."""
    tgt, drf = models(case)
    stops = [0]

    def path_conf(c: tuple[int, ...]) -> float:
        return float(np.prod([drf(c[:i]).max() for i in range(len(c) + 1)]))

    # cut-off: the median path confidence of the drafts it is asked about (1..L-1 tokens),
    # so that it cuts some drafts short and lets others grow, whatever the models
    lens = range(1, case.L)
    cut = float(np.median([path_conf(c) for n in lens for c in itertools.product(range(case.V), repeat=n)]))

    def keep(prefixes: list[tuple[int, ...]]) -> bool:
        go = max(path_conf(c) for c in prefixes) > cut
        stops[0] += not go
        return go

    return E.dynamic_step_law(VERIFIERS[name], tgt, drf, case.V, case.L, case.K, keep), stops[0]


DYN_RUNS = [(n, c) for n in LOSSLESS for c in DYN_CASES if not (n == "mdbv" and c.K > 1)]


@pytest.mark.parametrize(("name", "case"), DYN_RUNS, ids=lambda v: v if isinstance(v, str) else v.name)
def test_lossless_with_the_dynamic_draft_length(name: str, case: Case) -> None:
    """auto's drafts end where the draft's confidence along the path says one more token
    would not pay: a length decided while drafting, jointly for the K lockstep drafts. The
    verifiers auto runs that way must stay exact for blocks of such a length, not only for
    a fixed L: every single-draft rule, and SpecTr for K = 2. mdbv with K >= 2 is not one
    of them (next test), so auto drafts a fixed L for it at T > 0."""
    if name in ("sd", "gbv"):
        case = replace(case, K=1)
    lw, stops = _dynamic_law(name, case)
    assert stops > 0  # the rule did cut drafts short
    assert abs(sum(lw.values()) - 1.0) < 1e-12
    assert E.strict_error(lw, tgt=models(case)[0], V=case.V, L=case.L) < 1e-10


def test_mdbv_is_biased_by_a_joint_dynamic_length() -> None:
    """Found by enumeration: when K >= 2 drafts share a length decided from all of them, the
    drafts are no longer i.i.d. fixed-length blocks and mdbv's block step (the selected
    draft's exact law) over-weights some prefixes by ~1e-3. Fixed-length drafts are exact
    (test_strictly_lossless); auto therefore never shortens mdbv drafts at T > 0."""
    errs = []
    for case in DYN_CASES:
        if case.K == 2:
            lw, _ = _dynamic_law("mdbv", case)
            errs.append(E.strict_error(lw, models(case)[0], case.V, case.L))
    assert max(errs) > 1e-3


def _padded_models(case: Case) -> tuple[E.Model, E.Model, int]:
    """Target and draft over V + 1 tokens: token V (the padding) is never emitted by the
    target; each draft switches to it for good where its own path confidence falls to the
    median (the length rule of `_dynamic_law`, applied per draft)."""
    tgt, drf = models(case)
    V = bot = case.V

    def path_conf(c: tuple[int, ...]) -> float:
        return float(np.prod([drf(c[:i]).max() for i in range(len(c) + 1)]))

    cut = float(np.median([path_conf(c) for n in range(1, case.L) for c in itertools.product(range(V), repeat=n)]))

    def tgt_pad(c: tuple[int, ...]) -> np.ndarray:
        return np.r_[np.ones(V) / V, 0.0] if bot in c else np.r_[tgt(c), 0.0]

    def drf_pad(c: tuple[int, ...]) -> np.ndarray:
        if bot in c or (len(c) >= 1 and path_conf(c) <= cut):
            return np.r_[np.zeros(V), 1.0]
        return np.r_[drf(c), 0.0]

    return tgt_pad, drf_pad, V + 1


@pytest.mark.parametrize("name", ["mdbv", "spectr"])
def test_per_draft_lengths_padded_with_an_impossible_token_stay_exact(name: str) -> None:
    """What the engine does for K >= 2 drafts at T > 0 (proposer per_draft, speculative.
    verify_block's padding column): each draft ends by its OWN rule, independently of the
    others (so the drafts stay i.i.d.), and is padded to L with a token the target never
    emits (q = 1, p = 0 there). Enumerated over the same cases as above plus K = 3: exact to
    1e-10, the padding is never emitted, and the target rows after the padding (the engine
    writes a uniform filler) do not change the law."""
    worst = 0.0
    cases = [c for c in DYN_CASES if c.K == 2] + [Case("dir1.0", 2, 3, 3, 0), Case("dir0.3", 3, 2, 3, 1)]
    for case in cases:
        tgt_pad, drf_pad, V1 = _padded_models(case)
        lw = E.step_law(VERIFIERS[name], tgt_pad, drf_pad, V1, case.L, case.K)
        assert not any(V1 - 1 in z for z in lw)
        worst = max(worst, E.strict_error(lw, tgt_pad, V1, case.L))
        tgt = models(case)[0]

        def other_filler(c: tuple[int, ...], tgt=tgt, bot=V1 - 1) -> np.ndarray:
            return np.r_[tgt(tuple(t for t in c if t != bot)), 0.0]

        lw2 = E.step_law(VERIFIERS[name], other_filler, drf_pad, V1, case.L, case.K)
        assert max(abs(lw.get(z, 0.0) - lw2.get(z, 0.0)) for z in set(lw) | set(lw2)) < 1e-12
    assert worst < 1e-10


# -- stacked proposers: drafts from DIFFERENT distributions in one trie ---------------------
# (decode/drafters/combine.py: a lookup's point mass beside the draft model's samples). Only rrs reads
# each draft's own q; spectr/mdbv assume i.i.d. drafts and are shown NOT to be exact here.
MIXES = [
    # (V, L, [kinds of the K drafts], lengths)
    (2, 2, ["point", "dir"], None), (3, 2, ["point", "dir"], None), (2, 3, ["point", "dir"], None),
    (3, 1, ["point", "dir", "dir"], None), (2, 2, ["point", "dir", "dir"], None),
    (3, 2, ["dir", "point"], None), (2, 2, ["point", "point"], None), (3, 1, ["point"], None),
    (2, 3, ["point", "dir"], [3, 1]), (3, 2, ["point", "dir"], [1, 2]), (2, 3, ["point", "dir", "dir"], [2, 3, 1]),
    (3, 2, ["dir", "dir2"], None),  # two sampled drafts from two different models
]


def _mix_models(V: int, L: int, kinds: list[str], seed: int) -> tuple[E.Model, list[E.Model]]:
    g = np.random.default_rng(seed)
    tgt = E.dirichlet_model(V, L, g, 1.0)
    drf = E.dirichlet_model(V, L, g, 1.0)
    other = E.dirichlet_model(V, L, g, 0.5)
    return tgt, [{"point": E.onehot_model(V, L, g), "dir": drf, "dir2": other}[k] for k in kinds]


@pytest.mark.parametrize("i", range(len(MIXES)), ids=lambda i: f"V{MIXES[i][0]}L{MIXES[i][1]}-{'+'.join(MIXES[i][2])}"
                         + (f"-len{MIXES[i][3]}" if MIXES[i][3] else ""))
def test_rrs_is_lossless_for_mixed_proposers(i: int) -> None:
    V, L, kinds, lengths = MIXES[i]
    tgt, drafts = _mix_models(V, L, kinds, 77 + i)
    lw = E.mixed_step_law(VERIFIERS["rrs"], tgt, drafts, V, L, lengths)
    assert abs(sum(lw.values()) - 1.0) < 1e-12
    assert E.strict_error(lw, tgt, V, L) < 1e-10
    assert E.completability_excess(lw, tgt, V, L) < 1e-10


def test_iid_rules_are_not_exact_for_mixed_proposers() -> None:
    """Why rrs exists: spectr reads q off the first alive draft, wrong once drafts differ
    (mdbv's selection assumes one q as well; the engine never hands either a stacked trie)."""
    V, L = 3, 2
    tgt, drafts = _mix_models(V, L, ["point", "dir"], 78)
    lw = E.mixed_step_law(VERIFIERS["spectr"], tgt, drafts, V, L)
    assert E.strict_error(lw, tgt, V, L) > 1e-4


def test_rrs_with_one_shared_q_gains_from_every_draft() -> None:
    """rrs on K i.i.d. drafts is exact too (the main CASES) and accepts more as K grows."""
    case = Case("dir1.0", 3, 2, 1, 0)
    taus = [etau("rrs", replace(case, K=K)) for K in (1, 2, 3)]
    assert taus[0] == pytest.approx(etau("sd", case), abs=1e-12)  # K = 1: it is sd
    assert taus[0] < taus[1] < taus[2]

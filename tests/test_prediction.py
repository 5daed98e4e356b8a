"""Predicted outputs (OpenAI's `prediction`): the client's guess at the answer is one more
lookup, so the answer is plain decoding's token for token whatever the guess.

The drafter is checked directly (aligned drafting from the first token, re-alignment by an
n-gram after an edit, nothing where the prediction has nothing); on SmolLM2 a right, an
edited and a wrong prediction under `auto`, `sd` and `mdbv` must all give AR's greedy text,
the right one with far fewer target passes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from localspec.bench.runner import quoted_text
from localspec.cli.main import main
from localspec.config import GenConfig, SamplingConfig
from localspec.costmodel import priors
from localspec.decode.drafters import registry
from localspec.decode.drafters.base import DraftRequest
from localspec.decode.drafters.prediction import ALIGNED, PredictionDrafter

PROMPT = [1, 2, 3]


def test_an_aligned_prediction_drafts_from_the_first_token() -> None:
    p = PredictionDrafter([10, 11, 12, 13, 14], n_prompt=len(PROMPT))
    t = p.propose(DraftRequest(PROMPT, 1, 3))
    assert t is not None and [t.nodes[i].token for i in t.path[0]] == [10, 11, 12] and p.matched == ALIGNED
    assert t.source == "prediction"
    assert p.continuation([*PROMPT, 10, 11], 8) == ([12, 13, 14], ALIGNED)
    assert p.continuation([*PROMPT, 10, 11, 12, 13, 14], 8) == ([], 0)  # all of it written: nothing left


def test_after_an_edit_an_ngram_finds_the_prediction_again() -> None:
    pred = [10, 11, 12, 13, 14, 15, 16]
    p = PredictionDrafter(pred, n_prompt=len(PROMPT), n_min=2, n_max=4)
    assert p.continuation([*PROMPT, 10, 99], 4) == ([], 0)  # left the prediction, no match yet
    assert p.continuation([*PROMPT, 10, 99, 12, 13], 3) == ([14, 15, 16], 2)  # back on it: 12 13 -> 14 ...
    assert p.continuation([*PROMPT, 10, 99, 11, 12, 13], 2) == ([14, 15], 3)  # the longest match wins


def test_a_prediction_match_starts_from_the_prompt_matchs_prior() -> None:
    got = priors.lookup_priors()
    for key, prior in got.items():
        if key[0] == "ngram" and key[2:] == ("prompt",):  # text the client gave, like the prompt
            assert got[("prediction", key[1])] == prior
    assert ("prediction", ALIGNED) in got  # an aligned bet is priced like the longest shipped match
    assert registry.is_lookup("prediction") and registry.one_chain("prediction")


def greedy(method: str, prediction: str | None, **kw) -> GenConfig:
    cfg = GenConfig(method=method, n_predict=80, seed=1, sampling=SamplingConfig(temp=0.0), prediction=prediction, **kw)
    cfg.validate()
    return cfg


QUESTION = [{"role": "user", "content": "Write a Python function that returns the n-th Fibonacci number."}]


@pytest.fixture(scope="module")
def smol(smollm2_path, smollm2_q4_0_path):
    from tests.support.helpers import session

    s = session(smollm2_path, smollm2_q4_0_path)
    ref = list(s.generate(QUESTION, greedy("ar", None)))[-1]
    return s, ref


@pytest.mark.parametrize("method", ["auto", "sd", "mdbv"])
def test_any_prediction_gives_ar_text(smol, method: str) -> None:
    s, ref = smol
    right = ref.text
    edited = right[: len(right) // 3] + "# an edit the answer does not have\n" + right[len(right) // 3:]
    wrong = "Lorem ipsum dolor sit amet, " * 8
    kw = {"K": 2, "L": 4} if method == "mdbv" else {}
    runs = {}
    for name, pred in (("right", right), ("edited", edited), ("wrong", wrong)):
        done = list(s.generate(QUESTION, greedy(method, pred, **kw)))[-1]
        assert done.text == ref.text, (method, name)
        runs[name] = done.stats
    got = runs["right"].proposed.get("prediction", (0, 0))
    assert got[0] == got[1] and got[1] >= 0.75 * runs["right"].n_tokens  # every drafted token right
    assert runs["right"].target_calls < ref.stats.target_calls / 3
    edited_acc = runs["edited"].proposed.get("prediction", (0, 0))[1]
    assert edited_acc > 0.5 * runs["edited"].n_tokens  # found again after the edit


def test_quoted_text_is_what_an_edit_prompt_quotes() -> None:
    """bench speed's `auto-pred`: the prediction an editor would send is the code the prompt quotes."""
    assert quoted_text("Rename x:\n\ndef f(x):\n    return x\n") == "def f(x):\n    return x\n"
    assert quoted_text("just a question") is None and quoted_text("q\n\n  \n") is None


@pytest.mark.parametrize("name, data, says", [
    ("missing.txt", None, "cannot read"),
    ("latin1.txt", b"caf\xe9\n", "is not UTF-8"),
])
def test_run_prediction_file_is_checked_before_a_model_loads(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             name: str, data: bytes | None, says: str) -> None:
    if data is not None:
        (tmp_path / name).write_bytes(data)
    assert main(["run", "-m", "no-such-model.gguf", "-p", "hi", "--prediction-file", str(tmp_path / name)]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1, err


def test_run_prediction_file_drafts_and_json_counts_it(smollm2_path: Path, tmp_path: Path) -> None:
    def run(*extra: str) -> dict:
        r = subprocess.run([sys.executable, "-m", "localspec.cli", "run", "-m", str(smollm2_path), "-t", "1", "-n", "32",
                            "--temp", "0", "-p", "Write a Python function that adds two numbers.", "--json", *extra],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout.strip().splitlines()[-1])
    plain = run("--method", "ar")
    (tmp_path / "pred.txt").write_text(plain["text"])
    got = run("--prediction-file", str(tmp_path / "pred.txt"))
    assert got["text"] == plain["text"]
    assert got["proposers"]["prediction"]["accepted"] > 0.5 * got["n_tokens"]


def test_a_prediction_the_grammar_refuses_is_cut_and_the_text_is_constrained_ars(smol) -> None:
    """Under a JSON schema the prediction's drafts are cut at their first refused token like
    any lookup's; a prediction that breaks the schema halfway still gives constrained AR's text."""
    import json

    from localspec.constrain import ConstraintSpec

    s, _ = smol
    schema = ConstraintSpec("json_schema", json.dumps({
        "type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}},
        "required": ["name", "age"], "additionalProperties": False}))
    ask = [{"role": "user", "content": "Describe a person as JSON with a name and an age."}]
    ref = list(s.generate(ask, greedy("ar", None, constraint=schema)))[-1]
    broken = ref.text[: len(ref.text) // 2] + "not json at all]]" + ref.text[len(ref.text) // 2:]
    for method in ("auto", "sd"):
        done = list(s.generate(ask, greedy(method, broken, constraint=schema)))[-1]
        assert done.text == ref.text, method
        assert done.stats.proposed.get("prediction", (0, 0))[1] > 0, done.stats.proposed

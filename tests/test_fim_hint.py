"""server/fim_hint.py: when an editor's next request drafts from its previous answer."""

from __future__ import annotations

from localspec.server.fim_hint import previous_answer_hint
from localspec.session import FimInput

OLD = FimInput("def f(x):\n    ", "\n\ndef g():\n    pass\n")
ANSWER = "return x + 1\n"


def test_typed_text_the_answer_suggested_leaves_the_rest() -> None:
    new = FimInput(OLD.prefix + "return ", OLD.suffix)
    assert previous_answer_hint(OLD, ANSWER, new) == "x + 1\n"
    assert previous_answer_hint(OLD, ANSWER, OLD) == ANSWER  # asked again as it was: all of it


def test_no_hint_where_the_request_does_not_continue_the_old_one() -> None:
    assert previous_answer_hint(OLD, ANSWER, FimInput(OLD.prefix + "yield ", OLD.suffix)) is None  # not suggested
    assert previous_answer_hint(OLD, ANSWER, FimInput("def h(y):\n    ", OLD.suffix)) is None  # elsewhere
    assert previous_answer_hint(OLD, ANSWER, FimInput(OLD.prefix + "return ", "\n")) is None  # another suffix
    assert previous_answer_hint(OLD, ANSWER, FimInput(OLD.prefix + ANSWER, OLD.suffix)) is None  # all typed
    assert previous_answer_hint(OLD, "", OLD) is None  # the old one wrote nothing

"""OpenAI's `prediction` field (Predicted Outputs) and what the usage says of it.

`{"type": "content", "content": "..." | [{"type": "text", "text": "..."}, ...]}`: the text the
client expects the answer to mostly be (an editor applying an edit sends the file as it was).
It only drafts (decode/drafters/prediction.py): the answer is the target's either way.
"""

from __future__ import annotations

from collections.abc import Mapping

from localspec.events import Stats
from localspec.server.errors import invalid

FIELDS = frozenset({"prediction"})
SHAPE = 'expected {"type": "content", "content": a string or an array of {"type": "text", "text": ...} parts}'


def prediction_of(body: Mapping[str, object]) -> str | None:
    """The predicted text of a request, None without one; a wrong shape is a 400."""
    p = body.get("prediction")
    if p is None:
        return None
    if not isinstance(p, Mapping) or p.get("type") != "content":
        raise invalid("prediction", f"prediction: {SHAPE}")
    c = p.get("content")
    if isinstance(c, str):
        return c
    if isinstance(c, list) and all(isinstance(x, Mapping) and x.get("type") == "text" and isinstance(x.get("text"), str)
                                   for x in c):
        return "".join(str(x["text"]) for x in c)
    raise invalid("prediction.content", f"prediction.content: {SHAPE}")


def prediction_usage(st: Stats) -> dict[str, int] | None:
    """OpenAI's completion_tokens_details for a turn that drafted from a prediction: its
    drafted tokens the target kept, and those it did not (OpenAI counts the prediction's
    tokens that did not appear in the answer; here, the ones drafted and refused)."""
    got = st.proposed.get("prediction")
    if got is None:
        return None
    drafted, accepted = got
    return {"accepted_prediction_tokens": accepted, "rejected_prediction_tokens": max(0, drafted - accepted)}

"""An editor's next completion, drafted from its previous one.

An editor asks at the cursor, shows the suggestion, and asks again when the user types on.
What the user types is usually the suggestion, so the new answer is usually the old one less
what was typed -- text that is in no prompt (the old answer was never sent back), which the
prompt lookup cannot find. When a FIM request's prefix is the client's previous request's
prefix plus text that the previous answer starts with, the rest of that answer becomes the
request's `prediction` (decode/drafters/prediction.py): drafted from the first token,
verified like every draft, so the completion is the target's whatever the user typed.
"""

from __future__ import annotations

from localspec.session import FimInput


def previous_answer_hint(old: FimInput, old_answer: str, new: FimInput) -> str | None:
    """The rest of `old_answer` after what was typed since `old`, or None when the new
    request does not continue the old one (another place, another file, typed text the old
    answer did not suggest, or nothing of it left)."""
    if new.suffix != old.suffix or new.prompt != old.prompt or not new.prefix.startswith(old.prefix):
        return None
    typed = new.prefix[len(old.prefix):]
    if not old_answer.startswith(typed):
        return None
    rest = old_answer[len(typed):]
    return rest if rest.strip() else None

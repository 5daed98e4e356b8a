"""Thinking models: the visible text split into reasoning and answer, and the budget.

    split.py   the one split rule: the model's own markers -> reasoning / answer pieces,
               stats per segment, answers-only history
    pieces.py  the typed stream: Piece (segment, text, tokens, kind, start) and Layout
               (which segment each visible character went to)
    budget.py  --reasoning-budget: close the block after N thinking tokens, continue on the
               same KV

Frontends render these pieces and never split again (cli/reasoning.py, server/worker.py,
tui/thinking.py).
"""

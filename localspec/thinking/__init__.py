"""Thinking models: the visible text split into reasoning and answer, and the budget.

    split.py   the model's own markers -> reasoning / answer pieces, stats per segment,
               answers-only history
    budget.py  --reasoning-budget: close the block after N thinking tokens, continue on the
               same KV

Frontends render these pieces (cli/reasoning.py, tui/thinking.py, server/thinking.py).
"""

"""How `--method auto` chooses each iteration: a policy object the one loop
(decode/speculative.drive) asks for the next iteration's plan and teaches with its result.

    auto.py    AutoPolicy: the cost model's choice, re-checked; lookups where they pay; AR
               probes and AR cost checks
    stack.py   AutoStack: when stacking a lookup onto the draft model's block pays
"""

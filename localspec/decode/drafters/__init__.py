"""Who drafts: every drafter behind one interface (base.py), one registry (registry.py).

The draft model (model.py), prompt lookup (lookup.py), the suffix store (suffix.py), the
target's MTP head (mtp.py) and their chain / stack combinators (combine.py) all implement
`base.Drafter`; the loop, `auto`, the CLI's --spec-type and `--explain` read the registry,
never a drafter's name. This file imports nothing so that config.py can read the registry
without pulling in the drafters (which import config).
"""

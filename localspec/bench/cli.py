"""`localspec bench …` subcommands that use the shared argparse tree (speed, ar, tables).

`bench parse` and `bench verify` parse their own arguments (sub-commands and --help of
their own): localspec/cli/main.py hands them argv before this parser runs (its PASSTHROUGH).
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    b = sub.add_parser("bench", help="benchmarks: speed, paired, ar, tables, memory, suffix, slots, ceiling, constraint, agent, fim, priors; parse and verify (own --help)",
                       epilog="also `localspec bench parse --help` (PARSE accuracy and speed on HumanEval) and "
                              "`localspec bench verify --help` (verifier micro-benchmark)")
    bsub = b.add_subparsers(dest="bench_command", metavar="BENCH")

    from localspec.bench import (
        agent,
        ar,
        ceiling,
        constraint,
        fim,
        memory,
        paired,
        priors,
        slots,
        speed,
        suffix,
        tables,
    )

    f = bsub.add_parser("fim", help="code completion (/infill) latency and exact match on stdlib holes, beside llama-server",
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                        epilog="example: localspec bench fim --holes 20 -t 2 --out fim.json")
    fim.add_args(f)
    f.set_defaults(func=fim.main)

    s = bsub.add_parser("speed", help="tok/s of AR, each method and llama.cpp's speculative loop, interleaved",
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    speed.add_args(s)
    s.set_defaults(func=speed.main)

    r = bsub.add_parser("ar", help="AR tok/s through localspec vs llama.cpp's llama-bench (Python cost per token)",
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ar.add_args(r)
    r.set_defaults(func=ar.main)

    t = bsub.add_parser("tables", help="the papers' tables: datasets x methods (BE, speedup), K/L/T ablations, plots",
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    tables.add_args(t)
    t.set_defaults(func=tables.main)

    m = bsub.add_parser("memory", help="each memory kind's rollback path (attention, snapshots, branch) vs AR and llama.cpp",
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    memory.add_args(m)
    m.set_defaults(func=memory.main)

    x = bsub.add_parser("suffix", help="the suffix proposer's Python cost per iteration on a 100k-token store (no model)",
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    suffix.add_args(x)
    x.set_defaults(func=suffix.main)

    sl = bsub.add_parser("slots", help="serve -np's rounds per method, without HTTP: aggregate tok/s of C generations on N slots",
                         formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    slots.add_args(sl)
    sl.set_defaults(func=slots.main)

    c = bsub.add_parser("ceiling", help="the most prompt lookups could give: the target's greedy answers replayed with a perfect gate on its batch curve",
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                        description="Replays the target's greedy answers as if every lookup draft were right and ran only "
                                    "where one exists: an upper bound on what the ngram proposer (latest) or any lookup "
                                    "over every earlier occurrence (any) could give over AR on this machine's batch curve "
                                    "(timed here with every row's logits, as a verification pays; --curve llama-bench or "
                                    "tokens:ms pairs instead), on the split sets' --half; a prompt with a schema is "
                                    "answered under it, its forced tokens drafted beside the lookups. With -md, "
                                    "also the best schedule of lookups AND the greedy draft model (its agreement with "
                                    "each answer read off one teacher-forced decode): a bound on any gate over both.",
                        epilog="example: localspec bench ceiling --kinds edit --half report --limit 8 -n 128 -t 2 --out ceiling.json;  "
                               "with the draft model: localspec bench ceiling -m qwen2.5-coder-1.5b-f16 -md qwen2.5-coder-0.5b-q4_0 --kinds edit")
    ceiling.add_args(c)
    c.set_defaults(func=ceiling.main)

    g = bsub.add_parser("constraint", help="a grammar's Python cost per iteration (fit, masked verify rows, commit) at L",
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    constraint.add_args(g)
    g.set_defaults(func=constraint.main)

    ag = bsub.add_parser("agent", help="a coding agent's tool-calling sessions replayed against localspec serve and "
                         "llama-server --jinja: tok/s, TTFT, tool-call validity",
                         formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                         epilog="example: localspec bench agent -m qwen2.5-coder-1.5b -md qwen2.5-coder-0.5b "
                                "--half report --sessions 6 --out agent.json")
    agent.add_args(ag)
    ag.set_defaults(func=agent.main)

    pr = bsub.add_parser("priors", help="fit the acceptance priors a fresh session starts from, on the split sets' tuning half",
                         formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                         epilog="example: localspec bench priors -m qwen2.5-coder-1.5b -md qwen2.5-coder-0.5b "
                                "--out localspec/data/priors.json")
    priors.add_args(pr)
    pr.set_defaults(func=priors.main)

    pa = bsub.add_parser("paired", help="two settings A and B on the same prompts, each run A B B A or B A A B in one process: "
                         "the median B/A tok/s, for decisions a 3 %% noise would otherwise hide",
                         formatter_class=argparse.RawDescriptionHelpFormatter, description=paired.__doc__,
                         epilog="example: localspec bench paired -m qwen2.5-coder-1.5b-f16 --kinds code "
                                "--a=\"-md qwen2.5-coder-0.5b-q4_0\" --b=\"-md qwen2.5-coder-0.5b-q4_0-pure\"")
    paired.add_args(pa)
    pa.set_defaults(func=paired.main)

    b.set_defaults(func=lambda a: (b.print_help(), 2)[1])

"""`localspec bench …` subcommands (speed, verify, parse)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    b = sub.add_parser("bench", help="benchmarks: speed (methods vs AR vs llama.cpp), verify, parse")
    bsub = b.add_subparsers(dest="bench_command", metavar="BENCH")

    from localspec.bench import speed

    s = bsub.add_parser("speed", help="tok/s of AR, each method and llama.cpp's speculative loop, interleaved",
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    speed.add_args(s)
    s.set_defaults(func=speed.main)

    from localspec.bench import ar

    r = bsub.add_parser("ar", help="AR tok/s through localspec vs llama.cpp's llama-bench (Python cost per token)",
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ar.add_args(r)
    r.set_defaults(func=ar.main)

    v = bsub.add_parser("verify", add_help=False, help="micro-benchmark of the verifiers (ms per call, K=4 L=8 V=151,936)")
    v.add_argument("args", nargs=argparse.REMAINDER)
    v.set_defaults(func=lambda a: __import__("localspec.bench.verify_speed", fromlist=["main"]).main(a.args))

    p = bsub.add_parser("parse", add_help=False, help="PARSE accuracy (HumanEval) and speed vs AR")
    p.add_argument("args", nargs=argparse.REMAINDER)
    p.set_defaults(func=lambda a: __import__("localspec.bench.parse", fromlist=["main"]).main(a.args))

    from localspec.bench import tables

    t = bsub.add_parser("tables", help="the papers' tables: datasets x methods (BE, speedup), K/L/T ablations, plots",
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    tables.add_args(t)
    t.set_defaults(func=tables.main)

    b.set_defaults(func=lambda a: (b.print_help(), 2)[1])

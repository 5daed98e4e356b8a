"""`localspec bench parse`: PARSE on HumanEval -- judge discrimination, accuracy, speed.

Three steps, each resumable (results are appended to JSON-lines files under --out):

  calibrate  problems 0-39: target-only greedy, draft-only greedy (pass/fail), and ONE
             target pass over each draft answer that records every judge's raw material
             (per-token gaps / nll / entropy of target and draft, the yes-share of every
             judge phrasing on the whole answer and of the default phrasing at each cut);
  auroc      from those records: AUROC of every candidate whole-answer score against the
             draft's pass/fail -- a judge is only as good as its discrimination;
  report     problems 40-99 (or a subset): pass@1 and time of target-only AR and of PARSE
             per judge / setting, in the same run, interleaved problem by problem so that
             load from other processes hits every method alike; several `--settings` give the tau/gamma
             table. The draft-alone pass@1 comes with it (PARSE's first draft IS the
             draft-alone greedy answer).

Problems 100-163 are refused (localspec.bench.humaneval).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

from localspec.bench.parse.common import DEFAULT_OUT


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="localspec bench parse", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="step", required=True)

    def common(p: argparse.ArgumentParser, problems: str) -> None:
        p.add_argument("-m", "--target", default="qwen2.5-coder-1.5b")
        p.add_argument("-md", "--draft", default="qwen2.5-coder-0.5b")
        p.add_argument("--problems", default=problems, help="HumanEval indices, e.g. 0-39 or 40-99 (100-163 refused)")
        p.add_argument("--out", default=DEFAULT_OUT, help="directory of the JSON-lines results (resumable)")
        p.add_argument("--tag", default="q4", help="name of this pair's result files")
        p.add_argument("-t", "--threads", type=int, default=None)

    c = sub.add_parser("calibrate", help="record judge raw scores on 0-39")
    common(c, "0-39")
    c.add_argument("--target-ar", action="store_true", help="also run target-only greedy (slow)")
    c.add_argument("--samples", type=int, default=0, help="extra sampled drafts per problem")
    c.add_argument("--draft-temp", type=float, default=0.8, help="temperature of the extra drafts")
    a = sub.add_parser("auroc", help="AUROC of every candidate judge score from the calibration records")
    common(a, "0-39")
    r = sub.add_parser("report", help="pass@1 and speed of AR and PARSE settings")
    common(r, "40-99")
    r.add_argument("--settings", default="", help="';'-separated judge[:k=v,...] settings "
                   "(e.g. 'likelihood;likelihood:gamma=6;prompt:threshold=0.8')")
    r.add_argument("--no-ar", action="store_true", help="skip the AR baseline (already in the file)")
    s = sub.add_parser("summary", help="print the table of a finished report")
    common(s, "40-99")
    s.add_argument("--plot", default=None, help="also draw pass@1 vs speedup per setting into this PNG")
    return ap


def main(argv: Iterable[str] | None = None) -> int:
    args = build_parser().parse_args(list(argv) if argv is not None else None)
    if args.step == "calibrate":
        from localspec.bench.parse.calibrate import calibrate

        return calibrate(args)
    if args.step == "auroc":
        from localspec.bench.parse.scores import cmd_auroc

        return cmd_auroc(args)
    if args.step == "report":
        from localspec.bench.parse.report import report

        return report(args)
    from localspec.bench.parse.summary import summarize

    return summarize(args)


if __name__ == "__main__":
    sys.exit(main())

"""`localspec` command line: run, chat, models, bench.

Bad input becomes one line on stderr and exit code 2 (no traceback); Ctrl-C exits 130
(`run`: the first Ctrl-C ends the answer after the current iteration, so the text so far,
its stats line or its --json line still come out; a second one aborts at once).
"""

from __future__ import annotations

import argparse
import json
import sys

from localspec import __version__
from localspec.cli import reasoning as cr
from localspec.cli.fim import add_fim_args, fim_input, read_text_file
from localspec.cli.input import read_prompt
from localspec.cli.interrupt import CtrlC, close_session, ctrl_c_stops
from localspec.cli.parser import HelpFormatter, Parser
from localspec.cli.spans import SpanLog
from localspec.errors import LocalspecError
from localspec.events import Done, Stats
from localspec.flags.args import add_gen_args, add_model_args, asked_of, session_options
from localspec.flags.reasoning import add_reasoning_format_arg
from localspec.session import FimInput, SessionOptions
from localspec.settings import Asked, check, resolve

EPILOG = """examples:
  localspec chat                                   # default pair, fetched on first use
  localspec run -m qwen2.5-coder-1.5b -md qwen2.5-coder-0.5b -p "Write quicksort in Python"
  localspec run -m target.gguf -md draft.gguf --method mdbv -K 3 -L 6 --temp 0.7 -p "..."
  localspec run ... --explain                      # why the cost model chose what it chose
  localspec models list | fetch NAME | path NAME | verify NAME | quantize SRC --type Q4_0
  localspec bench speed --quick
"""


RUN_DESCRIPTION = """\
Generate one answer with a target model (and a draft that speculates for it) and print it
on stdout; a stats line (or --json) follows on stderr.

prompt rule: prompts (-p, -f, --stop) must be UTF-8. Bytes that are not are refused (exit
2) naming the offset of the first bad byte, never silently replaced; a UTF-8 byte-order
mark at the start of a file is dropped; an empty or whitespace-only prompt is refused.
numbers: --ctx 0 = the model's training context (llama.cpp's meaning); -t 0 = automatic
threads; --batch below what the method needs in one target batch is refused with the
minimum (sd/gbv/mdbv/spectr: K x L + 2; auto: 64 to 66; every method: 16).
"""

RUN_EPILOG = """\
examples:
  localspec run -m qwen2.5-coder-1.5b -md qwen2.5-coder-0.5b -p "Write quicksort in Python"
  localspec run -m target.gguf -md draft.gguf --method sd -L 6 -f prompt.txt
  localspec run -m target.gguf -md draft.gguf --method mdbv -K 3 -L 6 --temp 0.7 -p "..."
  localspec run -m smollm2-135m --method ar --raw -p "Once upon a time" -n 64
  echo "Explain RAII" | localspec run -m qwen2.5-coder-1.5b -f - --json
  localspec run ... --explain       # the cost model's table and why it chose what it chose
  localspec run -m qwen2.5-coder-1.5b --fim-prefix-file a.py --fim-suffix-file b.py --n-indent 4 --json
"""

CHAT_DESCRIPTION = """\
Multi-turn chat with a target/draft pair (the default pair unless -m/-md): a full-screen
TUI on a terminal (Esc or Ctrl-C stops a reply, a second Ctrl-C quits, F1 lists the keys),
otherwise (--plain, or stdin/stdout not a terminal: said on stderr) a line REPL.
"""

CHAT_EPILOG = """\
examples:
  localspec chat                                  # default pair, fetched on first use
  localspec chat -m qwen2.5-coder-1.5b -md qwen2.5-coder-0.5b --method sd -L 6
  localspec chat --plain --temp 0.7               # line REPL: /reset forgets, Ctrl-D quits
"""


def _options(a: argparse.Namespace, asked: Asked, draft: str | None) -> SessionOptions:
    """SessionOptions from the flags, every number checked before a model loads."""
    opts, notes = check(session_options(a), asked, has_draft=draft is not None)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    return opts


def _pair_note(a: argparse.Namespace) -> None:
    """Said once the models loaded (a load error stays the only line on stderr)."""
    if getattr(a, "_pair_note", ""):
        print(f"note: {a._pair_note}", file=sys.stderr)


def _stats_line(st: Stats) -> str:
    ran = st.ran or st.method
    method = st.method if ran == st.method else f"{st.method} -> {ran}"
    parts = [f"{st.n_tokens} tokens in {st.seconds:.2f}s = {st.tok_per_s:.1f} tok/s", f"method {method}"]
    if ran != "ar":  # plain decoding: one token per target call, nothing drafted
        parts.append(f"K={st.K} L={st.L} block efficiency {st.block_efficiency:.2f}")
        parts.append(
            f"draft {st.draft_seconds:.2f}s / verify {st.verify_seconds:.2f}s / overhead {st.overhead_seconds:.2f}s"
        )
    for source, (drafted, accepted) in st.proposed.items():  # which proposer wrote what (docs/proposers.md)
        if drafted:
            parts.append(f"{source} {accepted}/{drafted} accepted")
    expected = st.forecast_tok_per_s
    if expected is not None and ran != "ar":  # the cost model's forecast of what auto ran
        parts.append(f"forecast {expected:.1f} tok/s")
    parts.append(f"prompt {st.prompt_tokens} tok in {st.prompt_seconds:.2f}s")
    line = "[" + " | ".join(parts) + "]"
    if st.method == "auto" and ran == "ar" and st.choice_note:
        line += f"\n[auto ran plain decoding: {st.choice_note}]"  # why, and what would pay
    return line


def _resolve_pair(a: argparse.Namespace, *, need_default: bool) -> tuple[str, str | None]:
    from localspec.models import default_pair

    target, draft = a.target, a.draft
    if target is None and need_default:
        target, d = default_pair()
        draft = draft or d
    if target is None:
        raise LocalspecError("no target model: pass -m/--target NAME_OR_PATH (see `localspec models list`)")
    if draft is None and getattr(a, "method", "auto") == "auto":
        draft, a._pair_note = _registry_draft(target)
    return target, draft


def _registry_draft(target: str) -> tuple[str | None, str]:
    """-md omitted: the registry's draft for this target when it is cached (used), else
    None with a one-line hint naming it. The note is printed once the flags are checked."""
    from localspec.models.registry import paired_draft
    from localspec.models.resolve import model_path

    name = paired_draft(target)
    if name is None:
        return None, ""
    if model_path(name).is_file():
        return name, f"no -md given: drafting with {name}, the registry's draft for this target"
    return None, (f"no -md given, so no speculation; the registry pairs this target with {name}: "
                  f"`localspec models fetch {name}`, then -md {name}")


def cmd_run(a: argparse.Namespace) -> int:
    from localspec.loading import open_session

    asked = asked_of(a)  # 1. the flags, checked (localspec.settings)
    if a.prediction_file is not None:  # what the answer will mostly be: drafted, never imposed
        asked.cfg.prediction = read_text_file(a.prediction_file)
    fim = fim_input(a)  # fill in the middle: the prompt is made once the target is loaded
    prompt = fim if fim is not None else read_prompt(a)
    target, draft = _resolve_pair(a, need_default=False)
    if asked.cfg.method == "ar" and not a.explain:
        draft = None if a.draft is None else draft
    opts = _options(a, asked, draft)
    with ctrl_c_stops() as ctrl_c:  # from the first load to the last free (cli/interrupt.py)
        try:
            sess = open_session(target, draft, opts)  # 2. the models (a second Ctrl-C: KeyboardInterrupt)
        except LocalspecError:
            if not ctrl_c.pressed:
                raise
            print("interrupted", file=sys.stderr)  # the user asked to stop first: that is the answer
            return 130
        ctrl_c.session = sess
        _pair_note(a)
        _answer(a, sess, prompt, asked, target, draft, ctrl_c)
        ctrl_c.closing = True  # freed here, a press only counts (an abort above leaves it to Python)
        close_session(sess)
    if ctrl_c.pressed:
        print("interrupted", file=sys.stderr)
        return 130
    return 0


def _answer(a: argparse.Namespace, sess, prompt: str | FimInput, asked: Asked, target: str, draft: str | None,
            ctrl_c: CtrlC) -> None:
    """Generate and print `run`'s answer and its stats line or --json line. After a Ctrl-C
    that came before the generation (while the models loaded), nothing is generated and
    the --json line says "interrupted" (a generation clears a stop asked before it)."""
    settings = resolve(asked, sess, target)  # 3. the model's card fills what was not typed
    if a.explain and not ctrl_c.pressed:
        print(sess.explain(settings.cfg), file=sys.stderr)
        print(settings.sampling_line(), file=sys.stderr)
    spans = SpanLog() if a.json else None  # who wrote each part of the text (--json)
    raw = a.raw
    if isinstance(prompt, FimInput):  # the target's FIM format (a model without it: exit 2)
        prompt, raw = sess.fim_prompt(prompt, settings.cfg.n_predict), True
    if ctrl_c.pressed:
        done, thinking = Done("interrupted", "", Stats(method=asked.cfg.method)), None
    else:  # thinking models: reasoning apart, budget
        done, thinking = cr.run_answer(sess, prompt, settings, raw=raw, fmt=a.reasoning_format, spans=spans)
    st = done.stats
    if done.message:
        print(f"\n[{done.message}]", file=sys.stderr)
    if a.json:
        if not done.text.endswith("\n"):
            print()
        payload = {
            "method": st.method,
            "target": target,
            "draft": draft,
            "text": done.text,
            **(cr.json_fields(thinking, done, a.reasoning_format) if thinking is not None
               else {"text": done.text, "reasoning": None}),
            "stop_reason": done.reason,
            "tok_per_s": st.tok_per_s,
            "parse": getattr(st, "parse", None),
            **st.to_json(),
            "spans": spans.trimmed(st.n_tokens) if spans is not None else [],
        }
        print(json.dumps(payload))
    elif thinking is not None:
        print()
        thought = cr.summary(thinking, speculative=st.method != "ar")  # None unless the model thought
        print(_stats_line(st) + (f" {thought}" if thought else ""), file=sys.stderr)


def cmd_chat(a: argparse.Namespace) -> int:
    from localspec.loading import open_session

    asked = asked_of(a)
    target, draft = _resolve_pair(a, need_default=True)
    opts = _options(a, asked, draft)
    plain = a.plain
    not_tty = [name for name, f in (("stdin", sys.stdin), ("stdout", sys.stdout)) if not f.isatty()]
    if not plain and not_tty:
        verb = "is not a terminal" if len(not_tty) == 1 else "are not terminals"
        print(f"localspec chat: {' and '.join(not_tty)} {verb}: using the plain line REPL "
              "(the TUI needs a terminal; --plain chooses the REPL outright)", file=sys.stderr)
        plain = True
    if not plain:
        try:
            from localspec.tui import run_tui
        except ImportError as e:
            print(f"localspec chat: the TUI is unavailable ({e}): using the plain line REPL", file=sys.stderr)
            plain = True
    if not plain:
        # the TUI captures download output into its own progress bar (tui/app.py _load)
        def factory(progress):
            return open_session(target, draft, opts, progress)

        return run_tui(factory, asked.cfg, "localspec chat", settle=lambda sess: resolve(asked, sess, target).cfg)
    sess = open_session(target, draft, opts)
    _pair_note(a)
    settings = resolve(asked, sess, target)
    sess.start_timing(settings.cfg)  # in the background: the first reply does not wait for it
    print(f"localspec chat: {target} <- {draft} (method {asked.cfg.method}); Ctrl-C stops a reply, Ctrl-D quits",
          file=sys.stderr)
    while True:
        try:
            line = input("> ")
        except UnicodeDecodeError as e:
            print(f"error: that line is not UTF-8 (byte 0x{e.object[e.start]:02x} at offset {e.start}); "
                  "type it again", file=sys.stderr)
            continue
        except EOFError:
            print()
            return 0
        except KeyboardInterrupt:
            print()
            return 0
        if not line.strip():
            continue
        if line.strip() in ("/reset", "/clear"):
            sess.reset()
            continue
        try:
            done = cr.chat_turn(sess, line, settings, a.reasoning_format)  # thinking printed apart
            print()
            print(_stats_line(done.stats), file=sys.stderr)
        except KeyboardInterrupt:
            print("\n[interrupted]", file=sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="localspec",
        description="Speculative generation on llama.cpp: a small draft proposes, a big target checks.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"localspec {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    r = sub.add_parser("run", help="generate one answer and print it (+ stats, or --json)",
                       description=RUN_DESCRIPTION, epilog=RUN_EPILOG, formatter_class=HelpFormatter)
    add_model_args(r, default_pair=False)
    src = r.add_mutually_exclusive_group()
    src.add_argument("-p", "--prompt", default=None,
                     help="prompt text (chat-templated unless --raw); UTF-8 (the prompt rule above)")
    src.add_argument("-f", "--file", default=None, metavar="PATH",
                     help="read the prompt from a UTF-8 file (- = stdin)")
    r.add_argument("--raw", action="store_true", help="no chat template: plain text completion")
    r.add_argument("--json", action="store_true", help="print one JSON object with text and stats as the last line")
    r.add_argument("--explain", action="store_true", help="print the cost model's prediction table and choice")
    add_gen_args(r)
    r.add_argument("--prediction-file", metavar="PATH", default=None,
                   help="what the answer will mostly be (e.g. the file an edit starts from; OpenAI's `prediction`): "
                        "drafted from, the answer is still the target's (UTF-8)")
    add_fim_args(r)
    add_reasoning_format_arg(r)
    r.set_defaults(func=cmd_run)

    c = sub.add_parser("chat", help="multi-turn chat (TUI; --plain for a line REPL)",
                       description=CHAT_DESCRIPTION, epilog=CHAT_EPILOG, formatter_class=HelpFormatter)
    add_model_args(c, default_pair=True)
    c.add_argument("--plain", action="store_true", help="line-based REPL instead of the TUI")
    add_gen_args(c)
    add_reasoning_format_arg(c)
    c.set_defaults(func=cmd_chat)

    # every subcommand registers itself; a broken import fails loudly (never a missing command)
    from localspec.bench import cli as bench_cli
    from localspec.cli import costs, devices, models, rpc
    from localspec.server import cli as server_cli

    for room in (models, costs, rpc, devices, bench_cli, server_cli):
        room.register(sub)
    return p


PASSTHROUGH = {"parse": "localspec.bench.parse.cli", "verify": "localspec.bench.verify_speed",
               "serve": "localspec.bench.serve"}


def main(argv: list[str] | None = None) -> int:
    """The command line; Ctrl-C anywhere in it, the start-up imports included (building the
    parser imports every command's module), is "interrupted" and exit 130, no traceback."""
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130


def _main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "bench" and argv[1] in PASSTHROUGH:
        # these benches own their argument parsing (sub-commands and --help of their own)
        import importlib

        try:
            return int(importlib.import_module(PASSTHROUGH[argv[1]]).main(argv[2:]) or 0)
        except LocalspecError as e:
            print(f"error: {e}", file=sys.stderr)
            return e.exit_code
    parser = build_parser()
    a = parser.parse_args(argv)
    if not getattr(a, "func", None):
        parser.print_help()
        return 2
    try:
        return int(a.func(a) or 0)
    except LocalspecError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except BrokenPipeError:  # `localspec run ... | head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())

"""The `localspec` command line, one module per command or concern.

    main.py       the parser tree and `main` (run, chat, serve, models, bench, ...)
    input.py      the prompt, checked before any model loads
    parser.py     terse argparse errors, defaults shown once
    reasoning.py  thinking-model output of run and chat
    interrupt.py  Ctrl-C in run, from the first load to the last free
    spans.py      who wrote each part of run's answer (--json)
    models.py, costs.py, devices.py, rpc.py   their subcommands

The flags run / chat / serve / bench share live one room below, in localspec/flags/, so
bench/ and server/ (whose subcommands main.py registers) never import this package.
"""

"""The `localspec` command line, one module per command or concern.

    main.py       the parser tree and `main` (run, chat, serve, models, bench, ...)
    args.py       flags shared by run / chat / serve / bench -> GenConfig, SessionOptions
    input.py      what the user typed, checked before any model loads
    parser.py     terse argparse errors, defaults shown once
    offload.py    GPU-offload flags (llama.cpp's names) -> LoadOptions
    reasoning.py  thinking-model flags and output
    models.py, costs.py, devices.py, rpc.py   their subcommands
"""

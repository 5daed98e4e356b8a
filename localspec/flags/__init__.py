"""The flags that several frontends share: `run`, `chat` and `devices` (cli/), `serve`
(server/) and the benches (bench/) add them to their parsers and read them back here.

This room sits below those three, so each imports it and none imports another for its flags
(cli/ registers bench/'s and server/'s subcommands; they never import cli/). It builds
settings objects (GenConfig, SessionOptions, LoadOptions, ConstraintSpec) and checks what
was typed; it loads nothing, and never imports decode/ or backend/.

    args.py       model and generation flags -> GenConfig (asked_of), SessionOptions
    constrain.py  --grammar, --grammar-file, -j/--json-schema, --json-schema-file -> ConstraintSpec
    offload.py    GPU-offload flags (llama.cpp's names) -> LoadOptions
    rpc.py        --rpc HOST:PORT
    reasoning.py  --reasoning, --reasoning-budget, --reasoning-format
    text.py       the text rule: what the user types is UTF-8, never silently replaced
"""

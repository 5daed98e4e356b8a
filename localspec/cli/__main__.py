"""`python -m localspec.cli` (tests and scripts run the CLI this way)."""

import sys

try:
    from localspec.cli.main import main
except KeyboardInterrupt:  # Ctrl-C while Python imports the CLI: no traceback (cli/main.py)
    print("\ninterrupted", file=sys.stderr)
    sys.exit(130)

sys.exit(main())

"""`python -m localspec.cli` (tests and scripts run the CLI this way)."""

import sys

from localspec.cli.main import main

sys.exit(main())

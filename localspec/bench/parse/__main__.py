"""`python -m localspec.bench.parse STEP ...`, the same as `localspec bench parse STEP ...`."""

import sys

from localspec.bench.parse.cli import main

sys.exit(main())

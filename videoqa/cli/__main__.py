"""`python -m videoqa.cli`: the `videoqa` command without the console script."""

import sys

from . import main

sys.exit(main())

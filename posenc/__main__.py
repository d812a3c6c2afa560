"""`python -m posenc` is the `posenc` console script."""

import sys

from .cli import main

sys.exit(main())

"""`python -m posenc.check.distributed jax|torch`: one runtime's checks, one JSON record per line."""

import sys

from . import main

sys.exit(main())

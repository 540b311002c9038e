"""``python -m eosink.cli ...``: the same as the ``eosink`` command."""

import sys

from eosink.cli import main

sys.exit(main())

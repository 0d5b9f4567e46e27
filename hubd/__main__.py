"""`python -m hubd`."""

import sys

from hubd.cli import main

sys.exit(main())

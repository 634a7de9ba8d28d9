"""`python -m proxy` is the `llmmeter` command."""

import sys

from proxy.cli import main

sys.exit(main())

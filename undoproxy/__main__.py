"""`python -m undoproxy` is the `undoproxy` command."""

import sys

from undoproxy.cli import main

sys.exit(main())

"""``python -m dbfs.cli``."""
import sys

from dbfs.cli import main

sys.exit(main())

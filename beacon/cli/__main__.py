"""
C{python -m beacon.cli}: the C{beacon} console script.
"""

import sys

from beacon.cli import main

sys.exit(main())

# SPDX-License-Identifier: MIT
# Copyright (c) the mom_events authors
"""``python -m mom_events``, as with the copied-in module."""

import sys

from mom_events import main

sys.exit(main())

"""``python -m rlix.agent`` = ``rlix-node-agent``."""

import sys

from rlix.agent.main import main

sys.exit(main())

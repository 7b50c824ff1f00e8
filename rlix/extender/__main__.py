"""``python -m rlix.extender``: the same as the ``rlix-extender`` command."""

from rlix.extender.main import main

raise SystemExit(main())

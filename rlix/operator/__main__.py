from rlix.operator.main import main

raise SystemExit(main())

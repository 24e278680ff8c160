from mme.cli import main

raise SystemExit(main())

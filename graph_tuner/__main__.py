from graph_tuner.cli import main

raise SystemExit(main())

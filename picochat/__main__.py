"""`python -m picochat` is the same as the `picochat` command."""

from picochat.cli.main import main

raise SystemExit(main())

"""The headless command line: `picochat ask|compact|info|clear|sessions|history|...`."""

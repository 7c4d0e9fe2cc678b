"""Tools for working on the project itself (not used by the library, the app or the CLI)."""

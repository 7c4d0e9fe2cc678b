"""``python -m explorer`` and ``tvm-explorer`` (pyproject.toml's script: this module's ``main``)."""
import sys

# The class server's launcher (serve, and a worker host's worker) imports only what starts and watches the
# server (explorer/server/launcher.py); every other command, the CLI with the library. Chosen when this module
# is imported, which both ways of running it do with the command line already in sys.argv.
if sys.argv[1:2] == ["serve"]:
    from .server.launcher import main
elif sys.argv[1:2] == ["worker"]:
    from .server.launcher import worker_main as main
else:
    from .cli import main

if __name__ == "__main__":
    sys.exit(main())

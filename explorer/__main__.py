import sys

# The class server's launcher imports only what starts and watches the server (explorer/serve.py);
# every other command, the CLI with the library.
if sys.argv[1:2] == ["serve"]:
    from .serve import main
else:
    from .cli import main

sys.exit(main())

import sys


def main() -> int:
    """``python -m explorer`` and ``tvm-explorer``: the class server's launcher imports only what starts and
    watches the server (explorer/serve.py); every other command, the CLI with the library."""
    if sys.argv[1:2] == ["serve"]:
        from .serve import main as command
    else:
        from .cli import main as command
    return command()


if __name__ == "__main__":
    sys.exit(main())

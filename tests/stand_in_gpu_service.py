"""The measuring service of a class server of several app processes (explorer/server/service.py)
with the stand-in GPU of tests/stand_in_gpu.py (tests/ on the PYTHONPATH)."""
import stand_in_gpu

from explorer.server import service

stand_in_gpu.install()
service.main()

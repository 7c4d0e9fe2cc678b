"""The measuring service of a multi-process class server (explorer/measuring.py) with the
stand-in GPU of tests/stand_in_gpu.py (tests/ on the PYTHONPATH)."""
import stand_in_gpu

from explorer import measuring

stand_in_gpu.install()
measuring.main()

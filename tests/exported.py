"""Loading an exported script (or any generated file) as a module, for the export tests."""
import importlib.util
import sys

from explorer.schedules.parsing import tvmscript_frames


def load(path, name="snippet"):
    """The module of ``path``, imported here: parsed with the frames the library's own TVMScript gets
    (tests/test_export.py loads one script per preset, each parse asking ``inspect`` for a deep stack)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # TVMScript's parser reads the source of the module it is called from
    try:
        with tvmscript_frames():
            spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    return module

"""Loading an exported script (or any generated file) as a module, for the export tests."""
import importlib.util
import sys


def load(path, name="snippet"):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # TVMScript's parser reads the source of the module it is called from
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    return module

"""Loading an exported script (or any generated file) as a module, for the export tests."""
import ast
import contextlib
import importlib.util
import sys
from pathlib import Path

from explorer.schedules.parsing import tvmscript_frames

# The IRModules that TVMScript's parser made of the scripts' ``@I.ir_module`` classes in this process, by the
# class's text and the values of the names it reads (the same objects, T and I, in every script).
_PARSED = {}


@contextlib.contextmanager
def _each_module_text_parsed_once(source: str):
    """``@I.ir_module`` on the classes of ``source`` (a script's text), loaded meanwhile: a class whose text
    and names an earlier script's class had gets the module that TVM's parser made of it then. The parser's
    module is a function of those alone (the presets of one workload print one Workload class: 105 round trips,
    31 texts); a text that fails to parse is parsed again each time, and fails each time."""
    from tvm.script.parser.ir import entry

    classes = {node.name: (ast.get_source_segment(source, node),
                           {name.id for name in ast.walk(node) if isinstance(name, ast.Name)})
               for node in ast.parse(source).body if isinstance(node, ast.ClassDef)}
    parse = entry.parse

    def once(program, extra_vars=None, *args, **kwargs):
        text, names = classes.get(getattr(program, "__qualname__", None), (None, ()))
        try:
            read = tuple((name, value) for name, value in sorted((extra_vars or {}).items()) if name in names)
            key = (text, read, args, tuple(sorted(kwargs.items())))
            hash(key)
        except TypeError:  # a name whose value cannot be a key
            key = None
        if text is None or key is None:
            return parse(program, extra_vars, *args, **kwargs)
        if key not in _PARSED:
            _PARSED[key] = parse(program, extra_vars, *args, **kwargs)
        return _PARSED[key]

    entry.parse = once
    try:
        yield
    finally:
        entry.parse = parse


def load(path, name="snippet"):
    """The module of ``path``, imported here: parsed with the frames the library's own TVMScript gets
    (tests/test_export.py loads one script per preset, each parse asking ``inspect`` for a deep stack), each
    TVMScript module text once per process (_each_module_text_parsed_once)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # TVMScript's parser reads the source of the module it is called from
    try:
        with tvmscript_frames(), _each_module_text_parsed_once(Path(path).read_text()):
            spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    return module


def run_standalone(*paths, env=None) -> list:
    """Run exported scripts one after the other in one fresh interpreter in which ``explorer`` cannot be
    imported (TVM comes from where this process found it), each as ``__main__`` from its own folder: one
    ``subprocess.CompletedProcess`` per script, with its own output, and a return code of 1 and the
    traceback as its error output where it raised. A script's process costs a second of CPU to start and
    import TVM, the same for each script; what each script does is its own.

    ``inspect`` is told that this command's frames and runpy's, which a script run as ``python file.py`` does not
    have, have no module file: TVMScript's parser asks inspect for the stack, and inspect scanned every loaded
    module for each of them (a tensor-core script's intrinsics: 3 of its 6 CPU-seconds)."""
    import json
    import subprocess
    from pathlib import Path

    import tvm
    import tvm_ffi

    tvm_dirs = sorted({str(Path(module.__file__).parents[1]) for module in (tvm, tvm_ffi)})
    code = f"""
import contextlib, inspect, io, json, os, runpy, sys, traceback
inspect.modulesbyfile.update(dict.fromkeys(['<string>', '<frozen runpy>'], ''))
sys.modules['explorer'] = None
sys.path[:0] = {tvm_dirs!r}
runs = []
for path in {[str(path) for path in paths]!r}:
    out, err, code = io.StringIO(), io.StringIO(), 0
    os.chdir(os.path.dirname(path))
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_path(path, run_name='__main__')
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else (exit.code is not None)
        except BaseException:
            traceback.print_exc()
            code = 1
    runs.append([code, out.getvalue(), err.getvalue()])
print(json.dumps(runs))
"""
    proc = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=300, env=env)
    if proc.returncode:
        raise RuntimeError(f"the scripts' interpreter failed: {proc.stderr[-2000:]}")
    return [subprocess.CompletedProcess([str(path)], code, out, err)
            for path, (code, out, err) in zip(paths, json.loads(proc.stdout.splitlines()[-1]), strict=True)]

"""on_import(name, configure): configure(module) once the module `name` is imported, at once where
it already is. For settings of another package's module that poolkit must not import itself (a
heavy import the package makes only when it needs it)."""
import importlib.abc
import importlib.util
import sys
import threading

_lock = threading.Lock()


def on_import(name, configure):
    """Calls configure(module) when `name` has been imported (its code run), or now where it has.
    An exception from configure is swallowed: the import itself must not fail for it."""
    with _lock:
        module = sys.modules.get(name)
        if module is None:
            sys.meta_path.insert(0, _Finder(name, configure))
            return
    _configured(configure, module)


def _configured(configure, module):
    try:
        configure(module)
    except Exception:  # noqa: BLE001 - a layout the setting no longer has: nothing to set
        pass


class _Finder(importlib.abc.MetaPathFinder):
    """Finds `name` through the other finders, once, and wraps its loader so that configure runs
    after the module's code."""

    def __init__(self, name, configure):
        self._name, self._configure = name, configure

    def find_spec(self, fullname, path, target=None):
        if fullname != self._name:
            return None
        with _lock:
            if self not in sys.meta_path:
                return None
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _Loader(spec.loader, self._configure)
        return spec


class _Loader(importlib.abc.Loader):
    """The module's own loader, with configure(module) after its code has run."""

    def __init__(self, loader, configure):
        self._loader, self._configure = loader, configure

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _configured(self._configure, sys.modules.get(module.__name__, module))

    def __getattr__(self, attribute):  # get_source, get_code, is_package, ...: the module's loader's
        return getattr(self._loader, attribute)

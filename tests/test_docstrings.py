"""Every public function, class and method of the package says what it does (issue 31): its own docstring, or the
one of the protocol method it overrides."""
import importlib
import inspect
import pkgutil

import fedcompanion


def _undocumented() -> list[str]:
    out = []
    for info in pkgutil.walk_packages(fedcompanion.__path__, "fedcompanion."):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                continue
            if not (inspect.isfunction(obj) or inspect.isclass(obj)):
                continue
            if not inspect.getdoc(obj):
                out.append(f"{module.__name__}.{name}")
            if inspect.isclass(obj):
                for method, member in vars(obj).items():
                    function = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
                    if method.startswith("_") or not inspect.isfunction(function) or function.__doc__:
                        continue
                    if not any(inspect.getdoc(getattr(base, method, None)) for base in obj.__mro__[1:]
                               if getattr(base, method, None) is not None):
                        out.append(f"{module.__name__}.{name}.{method}")
    return out


def test_every_public_definition_has_a_docstring():
    assert _undocumented() == []

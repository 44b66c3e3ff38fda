"""The field names of a dataclass and the choices written for them, read from the source of its module and of the classes it extends, without
importing any of them.

The example scripts' flags are the fields of `CoBAConfig`, and `CoBAConfig` extends transformers'
`TrainingArguments`, whose module imports torch, transformers and peft: several seconds before a parser exists. The
scripts check the names on a command line against the fields read here first, so a misspelt flag is refused in a
fraction of that time (`coba_trl.cli.check_names_before_import`). So is a value outside a field's `choices` where
those are written in the source (`declared_choices`); TrlParser still parses every value afterwards.

A class is found where its module binds the name: a `class` statement, an assignment from another name, or a
`from ... import` (followed into the module named, as in transformers' and TRL's lazy `__init__` files); every
branch of an `if` counts, so a class defined one way or another gives the fields of both. A field is an annotated
name in a class body (`ClassVar` excepted). When any class or base class cannot be found this way the answer is
None, and the scripts leave every check to the parser. The modules read are those the scripts name in their code,
and the packages those import from; their source is parsed, never run.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
import sys

Reference = tuple[str, str]  # (module name, class name), e.g. ("coba_trl.config", "CoBAConfig")


def module_file(module: str) -> str | None:
    """The source file of `module` (a loaded one's `__file__`, else found from its top package without importing it)."""
    loaded = sys.modules.get(module)
    if loaded is not None:
        return getattr(loaded, "__file__", None)
    top, *rest = module.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if not rest:
        return spec.origin
    for location in spec.submodule_search_locations or []:
        for path in (os.path.join(location, *rest) + ".py", os.path.join(location, *rest, "__init__.py")):
            if os.path.isfile(path):
                return path
    return None


@functools.cache
def _module_body(module: str) -> tuple[ast.stmt, ...] | None:
    path = module_file(module)
    if path is None or not path.endswith(".py"):
        return None
    with open(path, encoding="utf-8") as handle:
        return tuple(ast.parse(handle.read(), filename=path).body)


def _statements(body) -> list[ast.stmt]:
    """The statements of `body` and of every `if` / `try` branch in it."""
    found = []
    for statement in body:
        found.append(statement)
        if isinstance(statement, ast.If | ast.Try):
            found += _statements(statement.body) + _statements(statement.orelse)
        if isinstance(statement, ast.Try):
            found += _statements(statement.finalbody)
            for handler in statement.handlers:
                found += _statements(handler.body)
    return found


def _imported_module(module: str, node: ast.ImportFrom) -> str:
    """The absolute name of the module a `from ... import` in `module` reads from."""
    if not node.level:
        return node.module
    is_package = (module_file(module) or "").endswith("__init__.py")
    parts = module.split(".")
    base = parts[: len(parts) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def _classes(module: str, name: str) -> list[tuple[str, ast.ClassDef]] | None:
    """The class definitions `name` is bound to in `module` (with the module each is in), or None when some binding
    cannot be followed."""
    body = _module_body(module)
    if body is None:
        return None
    found = []
    for statement in _statements(body):
        if isinstance(statement, ast.ClassDef) and statement.name == name:
            found.append((module, statement))
        elif isinstance(statement, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == name for target in statement.targets
        ):
            if not isinstance(statement.value, ast.Name):
                return None
            bound = _classes(module, statement.value.id)
            if bound is None:
                return None
            found += bound
        elif isinstance(statement, ast.ImportFrom):
            for alias in statement.names:
                if (alias.asname or alias.name) == name:
                    bound = _classes(_imported_module(module, statement), alias.name)
                    if bound is None:
                        return None
                    found += bound
    return found or None


def _field_statements(module: str, name: str) -> list[tuple[str, ast.AnnAssign]] | None:
    """The field statements of dataclass `name` of `module` and of the classes it extends (each with the module it is
    in), base classes' first; None when one cannot be read."""
    classes = _classes(module, name)
    if classes is None:
        return None
    found = []
    for where, node in classes:
        for base in node.bases:
            if not isinstance(base, ast.Name):
                return None
            inherited = _field_statements(where, base.id)
            if inherited is None:
                return None
            found += inherited
        found += [
            (where, statement)
            for statement in node.body
            if isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and "ClassVar" not in ast.unparse(statement.annotation)
        ]
    return found


def declared_fields(module: str, name: str) -> set[str] | None:
    """The field names of dataclass `name` of `module` and of the classes it extends; None when one cannot be read."""
    statements = _field_statements(module, name)
    return None if statements is None else {statement.target.id for _, statement in statements}


def declared_field_names(references: list[Reference]) -> set[str] | None:
    """The field names of every dataclass in `references`; None when any cannot be read from source."""
    names = set()
    for module, name in references:
        fields = declared_fields(module, name)
        if fields is None:
            return None
        names |= fields
    return names


def _strings(node: ast.expr | None) -> tuple[str, ...] | None:
    """The strings of a list or tuple literal of strings, else None."""
    if not isinstance(node, ast.List | ast.Tuple):
        return None
    if not all(isinstance(item, ast.Constant) and isinstance(item.value, str) for item in node.elts):
        return None
    return tuple(item.value for item in node.elts)


def _module_constant(module: str, name: str) -> ast.expr | None:
    """The value `name` is bound to by the one top-level assignment to it in `module`, else None."""
    bound = [
        statement.value
        for statement in _module_body(module) or ()
        if (
            isinstance(statement, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name for t in statement.targets)
        )
        or (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and statement.target.id == name
        )
    ]
    return bound[0] if len(bound) == 1 else None


def _choices(module: str, statement: ast.AnnAssign) -> tuple[str, ...] | None:
    """The `metadata={"choices": ...}` of a `field(...)` statement in `module`: a list or tuple of strings written
    there, or `NAME` / `list(NAME)` of such a tuple or list bound at the top of `module`; else None."""
    if not isinstance(statement.value, ast.Call) or "Literal" in ast.unparse(statement.annotation):
        return None  # a Literal's values are the parser's choices, whatever the metadata says
    metadata = next((k.value for k in statement.value.keywords if k.arg == "metadata"), None)
    if not isinstance(metadata, ast.Dict):
        return None
    value = next(
        (
            v
            for k, v in zip(metadata.keys, metadata.values, strict=True)
            if isinstance(k, ast.Constant) and k.value == "choices"
        ),
        None,
    )
    if isinstance(value, ast.Call) and ast.unparse(value.func) == "list" and len(value.args) == 1:
        value = value.args[0]
    if isinstance(value, ast.Name):
        value = _module_constant(module, value.id)
    return _strings(value)


def declared_choices(references: list[Reference]) -> dict[str, tuple[str, ...]]:
    """The choices of each field of the dataclasses in `references` whose `choices` can be read from source
    (`_choices`). A field redefined without readable choices by a class that extends another is left out."""
    found = {}
    for module, name in references:
        for where, statement in _field_statements(module, name) or ():
            choices = _choices(where, statement)
            found.pop(statement.target.id, None)
            if choices is not None:
                found[statement.target.id] = choices
    return found

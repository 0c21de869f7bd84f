"""Reading a YAML file partuner did not write: units files, plan files, NEST-C profiles and
fusion configs travel between people, so every way such a file can be wrong is one line.

:func:`read_yaml` parses with a safe loader (no tag builds an object or runs code: such a tag
is named and refused) and turns whatever the file does to a reader into the caller's error:
missing, a folder, unreadable, not UTF-8, a YAML syntax error (with its line), an integer of
thousands of digits, nesting deeper than Python's stack, or a "billion laughs" file whose
aliases expand to more than :data:`YAML_MAX_VALUES` values.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from partuner.errors import PartunerError

__all__ = [
    "YAML_MAX_BYTES",
    "YAML_MAX_VALUES",
    "UniqueKeyLoader",
    "read_yaml",
    "yaml_expanded",
    "yaml_refusal",
]

#: the most values a YAML file partuner reads may hold once its aliases are expanded
YAML_MAX_VALUES = 1_000_000
#: the largest YAML file partuner reads (a plan of 100,000 nodes takes a few MB; PyYAML reads
#: about a MB a second, and a 200 MB plan file ran for minutes without a word)
YAML_MAX_BYTES = 32 << 20


class UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects a key given twice in one mapping (YAML keeps the last)."""


def _construct_mapping(loader: UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False):
    seen: set[object] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if isinstance(key, str | int | float | bool) and key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} appears twice", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep)


UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def read_yaml(
    path: str | Path,
    fail: Callable[[str], PartunerError],
    hint: str,
    *,
    loader: type | None = None,
    all_docs: bool = False,
) -> Any:
    """The parsed document of the YAML file ``path`` (a list of its non-empty documents with
    ``all_docs``), read with ``loader`` (a safe loader; :class:`yaml.SafeLoader` by default).

    Raises ``fail(words)``: ``words`` name the file and what is wrong with it, ending with
    ``hint`` (what the file should be, or how to fix it) where the YAML itself is at fault.

    >>> import tempfile
    >>> f = Path(tempfile.mkdtemp()) / "u.yaml"
    >>> _ = f.write_text("a: " + "[" * 3000 + "]" * 3000)
    >>> read_yaml(f, ValueError, "fix it")
    Traceback (most recent call last):
    ...
    ValueError: ... nests deeper than partuner reads; fix it
    """
    p = Path(path)
    if not p.is_file():
        what = "is a folder, not a YAML file" if p.is_dir() else "not found"
        raise fail(f"{p} {what}")
    try:
        if p.stat().st_size > YAML_MAX_BYTES:
            raise fail(
                f"{p} is larger than {YAML_MAX_BYTES >> 20} MiB, more than partuner reads; {hint}"
            )
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise fail(f"{p} is not a UTF-8 text file; {hint}") from None
    except OSError as exc:
        raise fail(f"cannot read {p}: {exc.strerror or exc}") from None
    load = loader or yaml.SafeLoader
    try:
        if all_docs:
            doc: Any = [d for d in yaml.load_all(text, Loader=load) if d is not None]  # noqa: S506
        else:
            doc = yaml.load(text, Loader=load)  # noqa: S506 (a safe loader)
    except yaml.YAMLError as exc:
        if refused := yaml_refusal(exc):
            raise fail(f"{p} {refused}") from None
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise fail(f"{p}: YAML syntax error{where}: {problem}; {hint}") from None
    except RecursionError:
        raise fail(f"{p} nests deeper than partuner reads; {hint}") from None
    except (ValueError, OverflowError) as exc:  # an integer of thousands of digits
        why = str(exc).split(";")[0][:100] or type(exc).__name__
        raise fail(f"{p} holds a value partuner cannot read ({why}); {hint}") from None
    if bomb := yaml_expanded(doc):
        raise fail(f"{p} {bomb}")
    return doc


def yaml_refusal(exc: Exception) -> str | None:
    """For an error of PyYAML's safe loaders meeting a tag they will not build (``!!python/...``:
    the way a YAML file runs code in an unsafe loader), words saying that this tag was refused,
    not that the YAML is malformed; None for any other error.

    >>> class E(Exception):
    ...     problem = "could not determine a constructor for the tag 'tag:yaml.org,2002:python/x'"
    ...     problem_mark = None
    >>> yaml_refusal(E())
    "uses the YAML tag 'tag:yaml.org,2002:python/x', which partuner refuses (a tag can make a YAML loader build objects or run code); write plain YAML data"
    """  # noqa: E501
    problem = str(getattr(exc, "problem", "") or "")
    head = "could not determine a constructor for the tag "
    if not problem.startswith(head):
        return None
    mark = getattr(exc, "problem_mark", None)
    line = f" at line {mark.line + 1}" if mark is not None else ""
    return (
        f"uses the YAML tag {problem[len(head) :]}{line}, which partuner refuses (a tag can make "
        "a YAML loader build objects or run code); write plain YAML data"
    )


def yaml_expanded(doc: object) -> str | None:
    """Words saying that ``doc`` (parsed YAML) holds more than :data:`YAML_MAX_VALUES` values
    once its aliases are expanded (a "billion laughs" file: small, endless to walk); else None.

    >>> a = [1] * 10
    >>> yaml_expanded({"k": [a] * 10}), yaml_expanded([[[a] * 100] * 100] * 10)[:30]
    (None, 'holds more than 1000000 values')
    """
    todo, n = [doc], 0
    while todo and n <= YAML_MAX_VALUES:
        v, n = todo.pop(), n + 1
        todo += [*v, *v.values()] if isinstance(v, dict) else v if isinstance(v, list) else []
    if n <= YAML_MAX_VALUES:
        return None
    return (
        f"holds more than {YAML_MAX_VALUES} values once its YAML aliases (*name) are expanded; "
        "write the data out plainly"
    )

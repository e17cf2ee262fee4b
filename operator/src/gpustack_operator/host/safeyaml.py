"""YAML read from a host file, safely: one function every reader of a node's YAML goes through.

A node's YAML (a ``KubeletConfiguration``, a CDI specification) is input the node's owner -- or
anything that could write there -- controls. ``yaml.safe_load`` builds no arbitrary object, but it is
not safe against every document:

* **an alias bomb** ("billion laughs"): a few hundred bytes whose aliases stand for hundreds of
  millions of nodes. Building it is cheap (an alias is a reference), so the cost arrives later, when
  anything walks or renders the value -- a reason quoting it printed 327 MB over ~30 s;
* **an alias to a node that holds it**: a structure without end; any walk of it recurses forever;
* **nesting thousands deep**: Python's recursion limit in whatever walks it;
* **a tag its value cannot hold** (``!!timestamp x``, ``!!bool maybe``, ``!!int ''``): PyYAML's safe
  constructors raise ``AttributeError``, ``KeyError``, ``IndexError`` and ``ValueError``, not
  ``YAMLError``.

:func:`load_yaml` composes the document first, refuses the first three by walking the composed
graph (without recursion, each alias counted as the whole node it stands for) *before* anything is
built from it, and turns every failure of the build into :class:`YamlError` with the reason in words.
:func:`yaml_kind` names a value in YAML's words for messages ("a mapping", "a sequence").
"""

from __future__ import annotations

import datetime

import yaml

# A configuration file is a few hundred YAML nodes, a dozen levels deep. Nine levels of nine aliases
# ("billion laughs") stand for 387 million.
MAX_NODES = 100_000
MAX_DEPTH = 64

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class YamlError(ValueError):
    """The text is not one YAML document this reader builds; ``str()`` says why, in bounded words."""


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def check_expansion(root: yaml.Node, max_nodes: int = MAX_NODES, max_depth: int = MAX_DEPTH) -> None:
    """Refuse a composed document that would build more than ``max_nodes`` nodes, each alias counted
    as the whole node it stands for, that nests deeper than ``max_depth``, or whose alias refers to a
    node holding it. Iterative and memoized: the check costs the composed nodes, not the expanded ones.
    Raises :class:`YamlError`."""
    weight: dict[int, int] = {}  # id(collection node) -> nodes it stands for, expanded
    on_path: set[int] = {id(root)}
    # (node, its children, how many of them are weighed already, their weight so far)
    stack: list[tuple[yaml.Node, list[yaml.Node], int, int]] = [(root, _children(root), 0, 1)]
    while stack:
        node, children, done, total = stack[-1]
        while done < len(children):
            child = children[done]
            if isinstance(child, yaml.ScalarNode):
                total += 1
            elif id(child) in weight:
                total += weight[id(child)]
            else:
                break
            done += 1
        if total > max_nodes:
            raise YamlError(
                f"it stands for more than {max_nodes} YAML nodes, each alias counted as the node it repeats (an "
                "alias bomb?), far past any configuration file; not read"
            )
        if done == len(children):
            stack.pop()
            on_path.discard(id(node))
            weight[id(node)] = total
            if stack:  # the parent takes this child's weight when it resumes (the memo holds it)
                continue
            break
        child = children[done]
        if id(child) in on_path:
            raise YamlError("an alias refers to a node that holds it (a structure without end); not read")
        if len(stack) >= max_depth:
            raise YamlError(f"nested more than {max_depth} levels deep, far past any configuration file; not read")
        stack[-1] = (node, children, done, total)
        on_path.add(id(child))
        stack.append((child, _children(child), 0, 1))


def _cut(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else f"{text[:limit]}..."


def load_yaml(text: str, max_nodes: int = MAX_NODES, max_depth: int = MAX_DEPTH) -> object:
    """One YAML document (``None`` for an empty one), built only after :func:`check_expansion`
    passed. Raises :class:`YamlError` naming the problem (and the line where the parser knows it);
    nothing else escapes, whatever ``text`` holds."""
    loader: yaml.SafeLoader | None = None
    try:
        loader = _Loader(text)  # the C loader encodes the text first: a lone surrogate is a ValueError
        node = loader.get_single_node()
        if node is None:
            return None
        check_expansion(node, max_nodes, max_depth)
        return loader.construct_document(node)
    except YamlError:
        raise  # check_expansion's own words (a ValueError, which the clause below would re-word)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise YamlError(f"not valid YAML{where}: {_cut(str(problem))}") from None
    except UnicodeError:  # only a str handed in can hold one: a file's text is decoded with replacement
        raise YamlError("not valid YAML: it holds a character that is no Unicode text (a lone surrogate)") from None
    except (ArithmeticError, AttributeError, LookupError, RecursionError, TypeError, ValueError) as exc:
        # PyYAML's safe constructors on a tag their value cannot hold: "!!timestamp x" is an
        # AttributeError, "!!bool maybe" a KeyError, "!!int ''" an IndexError, "2001-13-45" a ValueError.
        why = f"{type(exc).__name__}: {_cut(str(exc))}"
        raise YamlError(f"not valid YAML: a value its tag cannot hold ({why})") from None
    finally:
        if loader is not None:
            loader.dispose()


def yaml_kind(value: object) -> str:
    """What a YAML value is, in YAML's words (``a mapping``, ``a sequence``, ``an integer``, ...)."""
    words: list[tuple[type | tuple[type, ...], str]] = [
        (bool, "a boolean"),
        (int, "an integer"),
        (float, "a number"),
        (str, "a string"),
        (bytes, "binary data"),
        (datetime.datetime, "a timestamp"),
        (datetime.date, "a date"),
        (dict, "a mapping"),
        ((list, tuple), "a sequence"),
        ((set, frozenset), "a set"),
    ]
    if value is None:
        return "null"
    return next((w for t, w in words if isinstance(value, t)), f"a {type(value).__name__}")


__all__ = ["MAX_DEPTH", "MAX_NODES", "YamlError", "check_expansion", "load_yaml", "yaml_kind"]

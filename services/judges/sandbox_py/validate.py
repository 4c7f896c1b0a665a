# Validate(): parses the code read on stdin (no code runs, so no capabilities and no /tmp are
# needed) and writes {"errors": [{"line", "column", "message"}]} on fd 3.
import os, sys, _ast
from _json import encode_basestring as _quote

os.write(3, b"S")


def _text(s):
    return s.encode("utf-8", "replace").decode("utf-8")


def _is_result(target):
    # metric['result'] on its own or inside a tuple/list/starred target.
    t = type(target)
    if t is _ast.Subscript:
        v, k = target.value, target.slice
        return (type(v) is _ast.Name and v.id == "metric" and type(k) is _ast.Constant
                and k.value == "result")
    if t is _ast.Tuple or t is _ast.List:
        return any(_is_result(e) for e in target.elts)
    if t is _ast.Starred:
        return _is_result(target.value)
    return False


def _assigns_result(tree):
    stack = [tree]
    while stack:
        node = stack.pop()
        t = type(node)
        if t is _ast.Assign:
            if any(_is_result(x) for x in node.targets):
                return True
        elif t is _ast.AugAssign or t is _ast.For or t is _ast.AsyncFor:
            if _is_result(node.target):
                return True
        elif t is _ast.AnnAssign:
            if node.value is not None and _is_result(node.target):
                return True
        elif t is _ast.withitem:
            if node.optional_vars is not None and _is_result(node.optional_vars):
                return True
        elif t is _ast.Call:
            f = node.func
            if (type(f) is _ast.Attribute and type(f.value) is _ast.Name and f.value.id == "metric"
                    and f.attr in ("update", "__setitem__", "setdefault")):
                return True
        for name in node._fields:
            child = getattr(node, name, None)
            if isinstance(child, list):
                stack.extend(c for c in child if isinstance(c, _ast.AST))
            elif isinstance(child, _ast.AST):
                stack.append(child)
    return False


def _issue(line, column, message):
    line = line if type(line) is int else None
    column = column if type(column) is int else None
    return '{"line":%s,"column":%s,"message":%s}' % (
        "null" if line is None else line, "null" if column is None else column,
        _quote(_text(message)[:2000]))


_chunks = []
while True:
    _chunk = os.read(0, 1 << 20)
    if not _chunk:
        break
    _chunks.append(_chunk)
_code = b"".join(_chunks).decode("utf-8", "replace")
del _chunks
_issues = []
try:
    _tree = compile(_code, "<metric>", "exec", _ast.PyCF_ONLY_AST, True)
except SyntaxError as e:
    _issues.append(_issue(e.lineno, e.offset, str(e.msg)))
except MemoryError:
    _issues.append(_issue(None, None, "the code is too large or too deeply nested to parse"))
except Exception as e:
    _issues.append(_issue(None, None, "%s: %s" % (type(e).__name__, e)))
else:
    if not _assigns_result(_tree):
        _issues.append(_issue(None, None, "the code never assigns metric['result']"))
_data = ('{"errors":[%s]}' % ",".join(_issues)).encode("utf-8")
_view = memoryview(_data)
while _view:
    _view = _view[os.write(3, _view):]
os._exit(0)

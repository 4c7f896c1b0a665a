# Reads {"code", "context"} on stdin, runs the code with the globals of docs/api.md §6 and writes
# {"result", "result_set", "explanation", "error"} on fd 3. Uses the C half of the json module
# (_json) directly: `import json` pulls in `re` and costs more than the rest of the harness.
# Runs after lock_down.py in the same interpreter (the two are one script): it uses its os,
# sys and _A.
import _signal


_MAIN = os.getpid()
_MEMORY, _CPU, _CAP = _A[3], _A[4], _A[5]
_write = os.write
_exit = os._exit


def _on_xcpu(signum, frame):
    # The soft CPU limit: report at once, with the innermost line of the snippet, rather than
    # raise an exception the code could catch (the hard limit a second later is a SIGKILL).
    line = None
    while frame is not None and line is None:
        if frame.f_code.co_filename == "<metric>":
            line = frame.f_lineno
        frame = frame.f_back
    _finish(None, False, "", {"type": "CPULimitExceeded",
                              "message": "the code used more than %d s of CPU time" % _CPU,
                              "line": line})

try:
    import _json

    class _Options:
        strict = True
        object_hook = None
        object_pairs_hook = None
        parse_float = float
        parse_int = int
        parse_constant = float

    _scan = _json.make_scanner(_Options())

    def _loads(text):
        text = text.strip()
        value, end = _scan(text, 0)
        if end != len(text):
            raise ValueError("trailing data")
        return value

    def _not_json(o):
        raise TypeError(type(o).__name__)

    _encode = _json.make_encoder(None, _not_json, _json.encode_basestring, None, ":", ",",
                                 False, False, False)

    def _dumps(doc):
        return "".join(_encode(doc, 0))
except Exception:
    import json
    _loads = json.loads

    def _dumps(doc):
        return json.dumps(doc, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _text(s):
    # Lone surrogates would make the UTF-8 invalid.
    return s.encode("utf-8", "replace").decode("utf-8")


def _describe(e):
    line = None
    try:
        if isinstance(e, SyntaxError) and e.filename == "<metric>":
            line = e.lineno
        tb = e.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == "<metric>":
                line = tb.tb_lineno
            tb = tb.tb_next
    except BaseException:
        pass
    kind = "Exception"
    message = ""
    try:
        kind = type(e).__name__
        if isinstance(e, MemoryError):
            message = "the code ran out of memory (limit %d MiB)" % (_MEMORY >> 20)
        elif isinstance(e, SystemExit):
            message = "the code called sys.exit(%s)" % ("" if e.code is None else repr(e.code))
        elif isinstance(e, SyntaxError):
            message = str(e.msg)
        else:
            message = str(e)
    except BaseException:
        message = message or "(the exception could not be printed)"
    if type(line) is not int:
        line = None
    return {"type": _text(str(kind))[:200], "message": _text(message)[:2000], "line": line}


def _finish(result, result_set, explanation, error):
    if os.getpid() != _MAIN:  # a process the code forked: only the harness reports
        _exit(1)
    doc = {"result": result, "result_set": result_set, "explanation": explanation,
           "error": error}
    data = _dumps(doc).encode("utf-8")
    kept = len(explanation)
    while len(data) > _CAP and kept > 0:
        kept = max(0, kept - max(len(data) - _CAP, kept // 8, 1))
        doc["explanation"] = explanation[:kept] + " [truncated]" if kept else ""
        data = _dumps(doc).encode("utf-8")
    if len(data) > _CAP:
        doc = {"result": None, "result_set": result_set, "explanation": "",
               "error": {"type": "OutputLimitExceeded",
                         "message": "metric['result'] is larger than %d KiB" % (_CAP >> 10),
                         "line": None}}
        data = _dumps(doc).encode("utf-8")
    view = memoryview(data)
    while view:
        view = view[_write(3, view):]
    _exit(0)


_chunks = []
while True:
    _chunk = os.read(0, 1 << 20)
    if not _chunk:
        break
    _chunks.append(_chunk)
_input = _loads(b"".join(_chunks).decode("utf-8"))
del _chunks, _chunk
_null = os.open("/dev/null", os.O_RDONLY)
os.dup2(_null, 0)
os.close(_null)

_metric = {"result": None, "explanation": "", "structured_output": None}
_globals = {"__name__": "__main__", "__builtins__": __builtins__,
            "context": _input.get("context"), "metric": _metric}
_code = _input.get("code", "")
del _input
_error = None
_signal.signal(_signal.SIGXCPU, _on_xcpu)
try:
    exec(compile(_code, "<metric>", "exec", 0, True), _globals)
except BaseException as e:
    _error = _describe(e)
_signal.signal(_signal.SIGXCPU, _signal.SIG_IGN)

_m = _globals.get("metric")
if type(_m) is not dict:
    _m = _metric
_result = _m.get("result")
_result_set = _result is not None
if type(_result) is str:
    _result = _text(_result)
elif type(_result) is float and (_result != _result or _result in (float("inf"), float("-inf"))):
    _result = None
    _error = _error or {"type": "ValueError",
                        "message": "metric['result'] must be a finite number", "line": None}
elif type(_result) not in (bool, int, float, type(None)):
    _error = _error or {"type": "TypeError",
                        "message": "metric['result'] must be a bool, number, string or null, "
                                   "not %s" % _text(type(_result).__name__), "line": None}
    _result = None
_explanation = _m.get("explanation")
try:
    _explanation = "" if _explanation is None else _text(str(_explanation))
except BaseException as e:
    _explanation = ""
    _error = _error or _describe(e)
_finish(_result, _result_set, _explanation, _error)

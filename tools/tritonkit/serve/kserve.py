"""What the HTTP guard knows of Triton 2.51's KServe v2 HTTP API: its routes, and the checks each body needs.

Default deny: a request passes only if its method and path match one of :data:`ROUTES` (the routes
``src/http_server.cc`` of server 2.51 serves, with the methods its handlers accept). Its body then
gets the route's check, with numbers read the way Triton reads them (RapidJSON through TritonJson):

* an unsigned field (``binary_data_size``, ``priority``, ``timeout``, ``classification``, shared-memory
  offsets and sizes, shape dims) must be a JSON integer in ``[0, 2**64)``; Triton answers 500 to a
  negative one, 2**64, ``"64"``, ``16.0`` or ``true``; a shape dim must also stay below 2**63 (Triton
  stores it as ``int64``);
* string fields (``id``, ``name``, ``datatype``, ``shared_memory_region``) must be strings and boolean
  ones booleans (Triton: 500);
* ``Inference-Header-Content-Length`` must be plain decimal digits: Triton reads it with ``atoi``
  (``1_05`` is 1 to Triton, 105 to Python's ``int``);
* a key given twice in one JSON object is refused (Python keeps the last, RapidJSON's ``Find`` the
  first: the guard would check one value and Triton serve the other), and so are ``NaN``/``Infinity``;
* anywhere in the JSON, what RapidJSON fails to parse and Python reads (Triton answers 500 "failed to
  parse the request JSON buffer"): a number past the double range (``1e400``, an integer of 309 digits)
  or written with an exponent over 308, and a ``\\u`` escape of a high surrogate without its low half;
* the bytes the shapes declare must stay within ``max_bytes * EXPANSION`` (Triton allocates them before
  looking at the data: ``std::bad_alloc`` kills the process), and JSON nesting within Python's
  recursion limit (Triton's recursive parser dies of a stack overflow on 130,000 levels).

Compressed bodies (``Content-Encoding: gzip`` or ``deflate``, as tritonclient sends them) are inflated
here, within ``max_bytes``, checked, and forwarded inflated; Triton reads
``Inference-Header-Content-Length`` against the inflated body too.
"""

from __future__ import annotations

import json
import math
import re
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "EXPANSION",
    "ROUTES",
    "RefusedError",
    "Route",
    "check_body",
    "inflate",
    "is_readiness",
    "parse_json",
    "resolve",
]

#: Declared tensor bytes may exceed the body this many times (JSON numbers are longer than their
#: binary form the other way round; shared-memory inputs declare shape without body bytes).
EXPANSION = 4
_UINT64 = 1 << 64
_INT64 = 1 << 63
_DTYPE_BYTES = {
    "BOOL": 1, "INT8": 1, "UINT8": 1, "INT16": 2, "UINT16": 2, "FP16": 2, "BF16": 2,
    "INT32": 4, "UINT32": 4, "FP32": 4, "INT64": 8, "UINT64": 8, "FP64": 8, "BYTES": 4,
}  # fmt: skip
#: Characters a path may hold (RFC 3986 pchar and "/"); percent signs only as ``%XX``.
_PATH = re.compile(r"(?:/(?:[A-Za-z0-9\-._~!$&'()*+,;=:@]|%[0-9A-Fa-f]{2})+)+|/")
_DIGITS = re.compile(rb"[0-9]{1,10}")


class RefusedError(Exception):
    """A request the guard answers itself: ``status`` and a one-line message."""

    def __init__(self, status: int, message: str, *, count: bool = True) -> None:
        super().__init__(message)
        self.status = status
        self.count = count  # a limit refused it (not a readiness or availability answer)


@dataclass(frozen=True)
class Route:
    """One route of Triton's HTTP API: the methods it serves and what its body needs."""

    name: str
    pattern: re.Pattern[str]
    methods: frozenset[str]
    body: str  # "none" | "json" (an object, or empty) | "infer" | "generate"


def _route(name: str, pattern: str, methods: str, body: str) -> Route:
    return Route(name, re.compile(pattern), frozenset(methods.split()), body)


_MODEL = r"/v2/models/(?P<model>[^/]+)(?:/versions/(?P<version>[0-9]+))?"
_REPO = r"/v2/repository(?:/[^/]+)?"
ROUTES: tuple[Route, ...] = (
    _route("health", r"/v2/health/(?:live|ready)", "GET", "none"),
    _route("server metadata", r"/v2", "GET", "none"),
    _route("statistics", r"/v2/models/stats", "GET", "none"),
    _route("infer", _MODEL + r"/infer", "POST", "infer"),
    _route("generate", _MODEL + r"/generate(?:_stream)?", "POST", "generate"),
    _route("model ready", _MODEL + r"/ready", "GET", "none"),
    _route("model config", _MODEL + r"/config", "GET", "none"),
    _route("model statistics", _MODEL + r"/stats", "GET", "none"),
    _route("model trace", r"/v2/models/(?P<model>[^/]+)/trace/setting", "GET POST", "json"),
    _route("model metadata", _MODEL, "GET", "none"),
    _route("repository index", _REPO + r"/index", "POST", "json"),
    _route("repository control", _REPO + r"/models/[^/]+/(?:load|unload)", "POST", "json"),
    _route(
        "shared memory",
        r"/v2/(?:system|cuda)sharedmemory(?:/region/[^/]+)?/(?:status|register|unregister)",
        "GET POST",
        "json",
    ),
    _route("trace", r"/v2/trace/setting", "GET POST", "json"),
    _route("logging", r"/v2/logging", "GET POST", "json"),
)
_READY_ROUTES = ("health", "model ready")


_RESOLVED: dict[tuple[str, str], tuple[Route, str | None] | RefusedError] = {}


def resolve(method: str, path: str) -> tuple[Route, str | None]:
    """The route serving ``method path`` and the model it names; :class:`RefusedError` if none does."""
    key = (method, path)
    known = _RESOLVED.get(key)
    if known is None:
        try:
            known = _resolve(method, path)
        except RefusedError as refused:
            known = refused
        if len(_RESOLVED) >= 4096:  # the paths in use repeat: a small memo, emptied when full
            _RESOLVED.clear()
        _RESOLVED[key] = known
    if isinstance(known, RefusedError):
        raise RefusedError(known.status, str(known))
    return known


def _resolve(method: str, path: str) -> tuple[Route, str | None]:
    if not _PATH.fullmatch(path):
        raise RefusedError(400, "the request path holds characters a URL path may not (RFC 3986)")
    if "/./" in path + "/" or "/../" in path + "/" or "//" in path:
        raise RefusedError(400, "the request path has empty, `.` or `..` segments")
    for route in ROUTES:
        match = route.pattern.fullmatch(path)
        if match is None:
            continue
        if method not in route.methods:
            expected = " or ".join(sorted(route.methods))
            raise RefusedError(405, f"method {method} is not served on {route.name}; expected {expected}")
        return route, match.groupdict().get("model")
    raise RefusedError(404, "not a route of this server's KServe v2 API")


def is_readiness(route: Route) -> bool:
    return route.name in _READY_ROUTES


# --- JSON as Triton reads it --------------------------------------------------------------------
def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        twice = next(key for key, _ in pairs if key in seen or seen.add(key))  # type: ignore[func-returns-value]
        raise RefusedError(400, f"the request JSON has the key `{twice[:60]}` twice in one object")
    return result


def _constant(name: str) -> Any:
    raise RefusedError(400, f"the request JSON holds `{name}`, which is not JSON")


_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates, parse_constant=_constant)
#: Digits as 0 and ``E`` as ``e``: what :func:`_suspect` looks for in one pass per pattern.
_SHAPES = bytes.maketrans(b"0123456789E", b"0000000000e")
_HIGH_ESCAPE = re.compile(rb"\\u[dD][89abAB]")
_DOUBLE_MAX = int(sys.float_info.max)
_HIGH_SURROGATE = re.compile("[\ud800-\udbff]")


def _too_big(text: str) -> RefusedError:
    return RefusedError(
        400,
        f"the request JSON holds the number {text[:24]}, past what Triton's JSON parser reads "
        "(at most 1.8e308, exponents up to 308)",
    )


def _checked_float(text: str) -> float:
    value = float(text)
    exponent = text.lower().partition("e")[2]
    if math.isinf(value) or (exponent and int(exponent) > 308):  # RapidJSON: kParseErrorNumberTooBig
        raise _too_big(text)
    return value


def _checked_int(text: str) -> int:
    value = int(text)
    if abs(value) > _DOUBLE_MAX:  # past int64/uint64 RapidJSON reads a double
        raise _too_big(text)
    return value


_CHECKED_DECODER = json.JSONDecoder(
    object_pairs_hook=_no_duplicates,
    parse_constant=_constant,
    parse_float=_checked_float,
    parse_int=_checked_int,
)


def _suspect(text: bytes) -> bool:
    """Whether ``text`` may hold what RapidJSON refuses and Python reads: an exponent of three digits or
    more, 309 digits in a row, a high-surrogate escape. Only such bodies take the slower, checked
    decoding. (``rfind``: CPython's reverse search skips on the needle's first byte, rare in numbers.)"""
    shapes = text.translate(_SHAPES)
    if shapes.rfind(b"e000") >= 0 or shapes.rfind(b"e+000") >= 0 or b"0" * 309 in shapes:
        return True
    return shapes.rfind(b"\\u") >= 0 and _HIGH_ESCAPE.search(text) is not None


def _lone_surrogate(value: Any) -> bool:
    """Whether a string (key or value) in ``value`` holds a high surrogate without its low half."""
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) is str:
            if _HIGH_SURROGATE.search(item):
                return True
        elif type(item) is dict:
            stack.extend(item)
            stack.extend(item.values())
        elif type(item) is list:
            stack.extend(item)
    return False


def parse_json(text: bytes) -> Any:
    """The JSON value of ``text``; :class:`RefusedError` (400) for anything Triton would not read the same."""
    try:
        if not _suspect(text):
            return _DECODER.decode(text.decode("utf-8"))
        value = _CHECKED_DECODER.decode(text.decode("utf-8"))
        if _lone_surrogate(value):
            raise RefusedError(
                400, "the request JSON holds a \\u escape of a high surrogate without its low half"
            )
        return value
    except RecursionError:
        raise RefusedError(400, "the request JSON is nested too deeply") from None
    except UnicodeDecodeError:
        raise RefusedError(400, "the request JSON is not UTF-8") from None
    except ValueError as exc:
        raise RefusedError(400, f"the request JSON does not parse: {exc}") from None


def _uint(value: Any) -> bool:
    return type(value) is int and 0 <= value < _UINT64


_KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "uint": (_uint, "an integer from 0 to 2^64-1"),
    "str": (lambda v: isinstance(v, str), "a string"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "uint|str": (lambda v: _uint(v) or isinstance(v, str), "an unsigned integer or a string"),
    "object": (lambda v: isinstance(v, dict), "an object"),
}


#: Keys a ``parameters`` object may hold: Triton's cost per map grows faster than its size (100,000
#: keys took 28-31 s of its CPU for one request; 10,000, 0.5 s).
MAX_PARAMETERS = 128  # as the gRPC guard's per map


def _check_fields(where: str, obj: dict[str, Any], kinds: dict[str, str]) -> None:
    """Each field of ``obj`` named in ``kinds`` is of that kind (see ``_KINDS``)."""
    for key, value in obj.items():
        kind = kinds.get(key)
        if kind is not None and not _KINDS[kind][0](value):
            got = json.dumps(value)[:40]
            raise RefusedError(400, f"{where}`{key}` must be {_KINDS[kind][1]}; got {got}")


def _check_size(what: str, parameters: Any) -> None:
    """``what`` (a ``parameters`` object, or a generate request) holds at most MAX_PARAMETERS keys."""
    if isinstance(parameters, dict) and len(parameters) > MAX_PARAMETERS:
        raise RefusedError(400, f"{what} holds {len(parameters)} keys; at most {MAX_PARAMETERS} are accepted")


_REQUEST_FIELDS = {"id": "str", "parameters": "object"}
_REQUEST_PARAMETERS = {
    "sequence_id": "uint|str",
    "sequence_start": "bool",
    "sequence_end": "bool",
    "priority": "uint",
    "timeout": "uint",
    "binary_data_output": "bool",
}
_IO_PARAMETERS = {
    "binary_data_size": "uint",
    "shared_memory_region": "str",
    "shared_memory_offset": "uint",
    "shared_memory_byte_size": "uint",
    "binary_data": "bool",
    "classification": "uint",
}


def _flatten(data: list[Any]) -> list[Any]:
    if not any(type(element) is list for element in data):
        return data  # flat already (the usual case)
    out: list[Any] = []
    for element in data:
        out.extend(_flatten(element) if type(element) is list else (element,))
    return out


def _finite(v: Any) -> bool:
    return (type(v) is float and math.isfinite(v)) or type(v) is int


def _element_kind(datatype: str) -> tuple[Callable[[Any], bool], str]:
    if datatype == "BYTES":
        return (lambda v: type(v) is str), "strings"
    if datatype == "BOOL":
        return (lambda v: type(v) is bool), "true/false"
    if datatype.startswith(("FP", "BF")):
        return _finite, "finite numbers"
    if datatype.startswith("UINT"):
        return (lambda v: type(v) is int and 0 <= v < _UINT64), "unsigned integers"
    return (lambda v: type(v) is int and -_INT64 <= v < _INT64), "integers"


#: Datatype -> (whether a data element is of its kind, what is expected).
_ELEMENT_KINDS = {datatype: _element_kind(datatype) for datatype in _DTYPE_BYTES}


def _check_data(name: str, datatype: str, shape: list[int], data: Any) -> None:
    """Inline ``data`` must be an array holding one element per shape position, of the datatype's kind."""
    if type(data) is not list:
        raise RefusedError(400, f"input `{name}`: `data` must be an array")
    elements = _flatten(data)
    if len(elements) != math.prod(shape):
        raise RefusedError(
            400, f"input `{name}`: shape {shape} needs {math.prod(shape)} data elements; got {len(elements)}"
        )
    kind = _ELEMENT_KINDS.get(datatype)
    if kind is None:
        return  # an unknown datatype: Triton refuses it (400)
    kind_ok, expected = kind
    if not all(map(kind_ok, elements)):
        bad = next(i for i, v in enumerate(elements) if not kind_ok(v))
        raise RefusedError(
            400, f"input `{name}` ({datatype}): expected {expected}; element {bad} is {elements[bad]!r}"[:300]
        )


def _check_input(item: Any, max_declared: int, declared: int) -> tuple[int, int]:
    """(bytes the input declares, binary bytes it takes from the body)."""
    if type(item) is not dict:
        raise RefusedError(400, "every entry of `inputs` must be an object")
    name, datatype, shape = item.get("name"), item.get("datatype"), item.get("shape")
    if type(name) is not str or type(datatype) is not str:
        raise RefusedError(400, "every input needs `name` and `datatype`, both strings")
    if type(shape) is not list or not all(type(d) is int and 0 <= d < _INT64 for d in shape):
        raise RefusedError(400, f"input `{name[:60]}`: `shape` must be a list of integers from 0 to 2^63-1")
    parameters = item.get("parameters")
    binary = 0
    if parameters is None:
        sources = int("data" in item)
    else:
        if type(parameters) is not dict:
            raise RefusedError(400, f"input `{name[:60]}`: `parameters` must be an object")
        _check_size(f"input `{name[:60]}`: `parameters`", parameters)
        _check_fields(f"input `{name[:60]}`: parameter ", parameters, _IO_PARAMETERS)
        binary = parameters.get("binary_data_size", 0)
        sources = (
            ("data" in item) + ("binary_data_size" in parameters) + ("shared_memory_region" in parameters)
        )
    if sources != 1:
        raise RefusedError(
            400,
            f"input `{name[:60]}` must set exactly one of `data`, parameter `binary_data_size` or "
            f"parameter `shared_memory_region`; it sets {int(sources)}",
        )
    size = math.prod(shape) * _DTYPE_BYTES.get(datatype, 8)
    if declared + size <= max_declared and "data" in item:
        _check_data(name[:60], datatype, shape, item["data"])
    return size, binary


def check_infer(body: bytes, header_length: bytes | None, max_bytes: int) -> None:
    """Refuse an infer body Triton would answer 500 to, or crash on (see the module's docstring)."""
    if header_length is None:
        size = len(body)
    elif _DIGITS.fullmatch(header_length):
        size = int(header_length)
    else:
        raise RefusedError(
            400, f"Inference-Header-Content-Length must be decimal digits; got {header_length[:20]!r}"
        )
    if size > len(body):
        raise RefusedError(
            400, f"Inference-Header-Content-Length {size} is outside the body of {len(body)} bytes"
        )
    request = parse_json(body[:size])
    if not isinstance(request, dict):
        raise RefusedError(400, f"the request JSON must be an object; got {type(request).__name__}")
    _check_fields("the request's ", request, _REQUEST_FIELDS)
    _check_size("the request's `parameters`", request.get("parameters"))
    _check_fields("request parameter ", request.get("parameters", {}), _REQUEST_PARAMETERS)
    inputs = request.get("inputs")
    if not isinstance(inputs, list):
        raise RefusedError(400, "the request JSON needs `inputs`: a list of objects")
    max_declared = max_bytes * EXPANSION
    declared = binary = 0
    for item in inputs:
        size_declared, size_binary = _check_input(item, max_declared, declared)
        declared, binary = declared + size_declared, binary + size_binary
    if declared > max_declared:
        raise RefusedError(413, f"the inputs declare {declared} bytes; at most {max_declared} are accepted")
    if binary != len(body) - size:
        raise RefusedError(
            400,
            f"the inputs' binary_data_size add up to {binary} bytes; the body holds {len(body) - size} "
            "after the JSON header",
        )
    outputs = request.get("outputs", [])
    if not isinstance(outputs, list) or not all(isinstance(o, dict) for o in outputs):
        raise RefusedError(400, "`outputs` must be a list of objects")
    for output in outputs:
        _check_fields("an output's ", output, {"name": "str", "parameters": "object"})
        if "name" not in output:
            raise RefusedError(400, "every entry of `outputs` needs a `name`")
        _check_size(f"output `{output['name'][:60]}`: `parameters`", output.get("parameters"))
        _check_fields(
            f"output `{output['name'][:60]}`: parameter ", output.get("parameters", {}), _IO_PARAMETERS
        )


def check_body(route: Route, body: bytes, header_length: bytes | None, max_bytes: int) -> None:
    """The check ``route`` needs for ``body`` (already inflated); :class:`RefusedError` when it fails."""
    if route.body == "infer":
        check_infer(body, header_length, max_bytes)
    elif route.body == "generate":
        request = parse_json(body)
        if not isinstance(request, dict):
            raise RefusedError(400, "a generate request must be a JSON object")
        _check_size("a generate request", request)  # its keys are inputs and parameters to Triton
        _check_size("a generate request's `parameters`", request.get("parameters"))
    elif route.body == "json":
        parsed = parse_json(body) if body.strip() else {}
        if not isinstance(parsed, dict):
            raise RefusedError(400, "the request body must be a JSON object")
        if route.name == "repository control":
            _check_load_files(parsed)
    elif body:
        raise RefusedError(400, f"{route.name} takes no request body; got {len(body)} bytes")


#: Linux's NAME_MAX and PATH_MAX: Triton 2.51 aborts (SIGABRT) on a model-load file name past them.
_NAME_MAX = 255
_PATH_MAX = 4096


def _check_load_files(request: dict[str, Any]) -> None:
    """A model load's ``file:<path>`` parameters name files Triton writes: each name within NAME_MAX
    bytes and the path within PATH_MAX (past them Triton 2.51 aborts instead of answering)."""
    parameters = request.get("parameters")
    if not isinstance(parameters, dict):
        return
    for key in parameters:
        if not (isinstance(key, str) and key.startswith("file:")):
            continue
        path = key[len("file:") :].encode()
        longest = max((len(part) for part in path.split(b"/")), default=0)
        if longest > _NAME_MAX or len(path) > _PATH_MAX:
            raise RefusedError(
                400,
                f"a model load's file path may have names of at most {_NAME_MAX} bytes and "
                f"{_PATH_MAX} bytes in all; got a name of {longest} bytes, {len(path)} in all",
            )


#: Bytes inflated at a time: each piece is reserved against the guard's budget before it is kept.
_INFLATE_PIECE = 1 << 20


def inflate(
    body: bytes, encoding: str, limit: int, reserve: Callable[[int], None] = lambda size: None
) -> bytes:
    """``body`` decompressed as Triton would (gzip, or zlib-wrapped deflate), at most ``limit`` bytes,
    one piece at a time; ``reserve(size)`` is called for each piece before it is kept (the guard's
    budget: it raises to refuse), so what inflation holds is counted while it grows."""
    decoder = zlib.decompressobj(wbits=47 if encoding == "gzip" else 15)  # 47: gzip or zlib header
    pieces: list[bytes] = []
    total = 0
    try:
        data = body
        while True:
            piece = decoder.decompress(data, min(_INFLATE_PIECE, limit + 1 - total))
            data = decoder.unconsumed_tail
            total += len(piece)
            if total > limit:
                raise RefusedError(413, f"the {encoding} body inflates to over {limit} bytes")
            if piece:
                reserve(len(piece))
                pieces.append(piece)
            if decoder.eof or not data or not piece:
                break
        if not decoder.eof:
            raise RefusedError(400, f"the {encoding} body is truncated")
    except zlib.error as exc:
        raise RefusedError(400, f"the {encoding} body does not decompress: {exc}") from None
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)

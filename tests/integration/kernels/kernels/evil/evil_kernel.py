"""A Jupyter kernel that misbehaves on purpose, for sandcell's hostile-input tests.

It speaks the wire protocol well enough to run, and around each execution it
publishes what a broken or hostile kernel could: messages with a bad signature,
of another session, with invalid JSON, with too few frames, raw garbage, and
(for the code "HUGE") a frame far over the proxy's size limit. Between them it
publishes the real output: stdout "GOOD <code>" and the code as the result.
"""
import datetime
import hashlib
import hmac
import json
import sys
import threading
import uuid

import zmq

conn = json.load(open(sys.argv[1]))
key = conn["key"].encode()
ctx = zmq.Context()


def endpoint(port):
    sep = "-" if conn["transport"] == "ipc" else ":"
    return f"{conn['transport']}://{conn['ip']}{sep}{port}"


shell = ctx.socket(zmq.ROUTER)
shell.bind(endpoint(conn["shell_port"]))
control = ctx.socket(zmq.ROUTER)
control.bind(endpoint(conn["control_port"]))
iopub = ctx.socket(zmq.PUB)
iopub.bind(endpoint(conn["iopub_port"]))
hb = ctx.socket(zmq.REP)
hb.bind(endpoint(conn["hb_port"]))
session = str(uuid.uuid4())


def heartbeat():
    while True:
        hb.send(hb.recv())


threading.Thread(target=heartbeat, daemon=True).start()


def sign(parts):
    h = hmac.new(key, digestmod=hashlib.sha256)
    for p in parts:
        h.update(p)
    return h.hexdigest().encode()


def frames(msg_type, content, parent, raw_content=None, sess=None):
    header = {"msg_id": str(uuid.uuid4()), "session": sess or session, "username": "evil",
              "date": datetime.datetime.utcnow().isoformat() + "Z", "msg_type": msg_type,
              "version": "5.3"}
    parts = [json.dumps(header).encode(), json.dumps(parent).encode(), b"{}",
             raw_content if raw_content is not None else json.dumps(content).encode()]
    return [b"<IDS|MSG>", sign(parts)] + parts


def publish(msg_type, content, parent, **kw):
    iopub.send_multipart([msg_type.encode()] + frames(msg_type, content, parent, **kw))


def reply(sock, idents, msg_type, content, parent):
    sock.send_multipart(idents + frames(msg_type, content, parent))


def hostile(parent, code):
    forged = frames("stream", {"name": "stdout", "text": "BAD-SIGNATURE\n"}, parent)
    forged[1] = b"0" * 64
    iopub.send_multipart([b"stream"] + forged)
    other = dict(parent, session="another-session")
    publish("stream", {"name": "stdout", "text": "OTHER-SESSION\n"}, other)
    publish("stream", None, parent, raw_content=b"{not json")
    publish("stream", None, parent, raw_content=b"[1, 2]")
    iopub.send_multipart([b"<IDS|MSG>", b"too few frames"])
    iopub.send_multipart([b"garbage \x00\xff"])
    if code == "HUGE":
        publish("stream", {"name": "stdout", "text": "x" * (300 << 20)}, parent)


count = 0
poller = zmq.Poller()
poller.register(shell, zmq.POLLIN)
poller.register(control, zmq.POLLIN)
while True:
    for sock, _ in poller.poll():
        msg = sock.recv_multipart()
        i = msg.index(b"<IDS|MSG>")
        idents, header, content = msg[:i], json.loads(msg[i + 2]), json.loads(msg[i + 5])
        parent = header
        t = header["msg_type"]
        publish("status", {"execution_state": "busy"}, parent)
        if t == "kernel_info_request":
            reply(sock, idents, "kernel_info_reply",
                  {"status": "ok", "protocol_version": "5.3", "implementation": "evil",
                   "language_info": {"name": "evil"}}, parent)
        elif t == "execute_request":
            code = content["code"]
            if not content.get("silent"):
                count += 1
                publish("execute_input", {"code": code, "execution_count": count}, parent)
                hostile(parent, code)
                publish("stream", {"name": "stdout", "text": f"GOOD {code}\n"}, parent)
                publish("execute_result", {"execution_count": count, "metadata": {},
                                           "data": {"text/plain": code}}, parent)
                hostile(parent, None)
            reply(sock, idents, "execute_reply",
                  {"status": "ok", "execution_count": count, "user_expressions": {}},
                  parent)
        elif t == "shutdown_request":
            reply(sock, idents, "shutdown_reply", {"status": "ok"}, parent)
            sys.exit(0)
        else:
            reply(sock, idents, t.replace("_request", "_reply"), {"status": "ok"}, parent)
        publish("status", {"execution_state": "idle"}, parent)

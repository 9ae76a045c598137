"""The output of a wrapper kernel's child (bash, the JVM) for one request:
stdout and stderr each end with END and a tail up to \\x1e (a status or a
reply on stdout, nothing on stderr). Shared by bash_kernel.py and
java_kernel.py; `make` copies it into each kernelspec's dir, the one dir of
its kernel's that a box shows."""
import codecs
import os
import selectors

END = b"\x1eSANDCELL-END"


def read_to_markers(streams, publish, wake=None, each_turn=None):
    """Streams {fd: "stdout"|"stderr"} to publish(name, text) up to their end
    markers and returns {name: tail}, or None if the child closed one first.
    wake: an fd that only ends a wait (drained here); each_turn(): called
    before each wait. Text is decoded as UTF-8 across reads, and what could be
    the start of a marker is held back until the next read tells."""
    sel = selectors.DefaultSelector()
    pending = {name: b"" for name in streams.values()}
    decoders = {name: codecs.getincrementaldecoder("utf-8")("replace")
                for name in streams.values()}
    tails = {}
    for fd in streams:
        sel.register(fd, selectors.EVENT_READ)
    if wake is not None:
        sel.register(wake, selectors.EVENT_READ)
    try:
        while len(tails) < len(streams):
            if each_turn:
                each_turn()
            for key, _ in sel.select():
                if key.fd == wake:
                    try:
                        os.read(wake, 512)
                    except BlockingIOError:
                        pass
                    continue
                name = streams[key.fd]
                chunk = os.read(key.fd, 65536)
                if not chunk:  # the child is gone
                    return None
                buf = pending[name] + chunk
                i = buf.find(END)
                if i >= 0:
                    tail = buf[i + len(END):]
                    close = tail.find(b"\x1e")
                    if close < 0:  # the marker is not complete yet
                        pending[name] = buf
                        continue
                    tails[name] = tail[:close]
                    publish(name, decoders[name].decode(buf[:i], final=True))
                    pending[name] = b""
                    sel.unregister(key.fd)
                    continue
                keep = 0
                for n in range(min(len(END) - 1, len(buf)), 0, -1):
                    if END.startswith(buf[-n:]):
                        keep = n
                        break
                out, pending[name] = (buf[:-keep], buf[-keep:]) if keep else (buf, b"")
                publish(name, decoders[name].decode(out))
        return tails
    finally:
        sel.close()

# sandcell_profile.py — sandcell's start-up profile for Python kernels: the
# data-analysis results E2B clients expect. DataFrames get `e2b/data`,
# matplotlib Figures `e2b/chart` (and `image/png`), lists and dicts
# `application/json`; PIL images display on save() and show(); the inline
# matplotlib backend is the default and matplotlib's one-time notices stay off
# the user's stderr. Nothing heavy is imported here: pandas, matplotlib and PIL
# are reached by name (for_type_by_name) or patched when first imported.
# sandcell_startup.py loads this module and calls install(). An execution
# that prints, displays and imports nothing runs none of this code but the
# two streams' set_parent (a buffer check and a context variable).

import datetime
import functools
import json
import math
import os
import re
import sys

# A DataFrame with more cells than this gets no `e2b/data` (its text and HTML
# still come): the JSON would be large enough to stall or exceed a message.
MAX_DATA_CELLS = 1_000_000
# Characters of stdout or stderr in one kernel message, at most (about).
FLUSH_AT = 1 << 20
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"
UNKNOWN = {"type": "unknown", "title": None, "elements": []}


def install():
    """Registers the formatters and import patches in the running IPython."""
    import warnings

    from IPython import get_ipython

    ip = get_ipython()
    if ip is None:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _install(ip)


def _install(ip):
    from IPython.core.formatters import BaseFormatter
    from traitlets import ObjectName, Unicode

    class DataFormatter(BaseFormatter):
        """`e2b/data`: a table as {column: [values]}."""

        format_type = Unicode("e2b/data")
        print_method = ObjectName("_repr_e2b_data_")
        _return_type = (dict,)

    class ChartFormatter(BaseFormatter):
        """`e2b/chart`: what a matplotlib Figure shows, as E2B's chart dict."""

        format_type = Unicode("e2b/chart")
        print_method = ObjectName("_repr_e2b_chart_")
        _return_type = (dict,)

        # Matched here rather than as a type printer: the inline backend's
        # select_figure_formats() pops Figure from every formatter.
        def __call__(self, obj):
            try:
                figure = self.enabled and _is_a(obj, "matplotlib.figure", "Figure")
            except Exception:
                figure = False
            return figure_chart(obj) if figure else super().__call__(obj)

    # A headless kernel can only show figures inline; ipykernel sets this when
    # unset, an inherited MPLBACKEND=Agg would make plt.show() a warning.
    if not os.environ.get("MPLBACKEND", "").startswith("module://"):
        os.environ["MPLBACKEND"] = INLINE_BACKEND
    _quiet_matplotlib()

    disp = ip.display_formatter
    data = DataFormatter(parent=disp)
    data.for_type_by_name("pandas.core.frame", "DataFrame", dataframe_data)
    disp.formatters["e2b/data"] = data
    disp.formatters["e2b/chart"] = ChartFormatter(parent=disp)
    # A Figure made without pyplot has no png printer until the inline
    # backend is loaded (which then replaces this one with its own).
    disp.formatters["image/png"].for_type_by_name("matplotlib.figure", "Figure", figure_png)
    disp.formatters["application/json"].for_type(list, plain_json)
    disp.formatters["application/json"].for_type(dict, plain_json)

    ip.set_custom_exc((KeyboardInterrupt,), _interrupted)
    _own_thread_output(ip)  # first: _capture_fds's write check stays the outer frame
    _capture_fds(ip)
    _quick_flush()
    _quiet_log(ip)
    _iopub_flow_control(ip)

    sys.meta_path.insert(
        0,
        PatchFinder(
            {
                "PIL.Image": _patch_pil_image,
                "PIL.ImageShow": _patch_pil_imageshow,
                "matplotlib.axes._axes": _patch_bxp,
            }
        ),
    )


def _own_thread_output(ip):
    """Output of a thread (or asyncio task) carries the parent header of the
    execution that started it, as newer ipykernel does; this ipykernel
    stamps it with whichever request is current, so a thread still printing
    after its execution ended would print into the next one. The owner is a
    context variable: set at each execution, inherited by the tasks it
    creates, and handed to a thread when it starts. It is set where the
    kernel sets the streams' parent, before anything of the request runs."""
    import contextvars
    import threading

    from ipykernel.iostream import OutStream
    kernel = getattr(ip, "kernel", None)
    if kernel is None or getattr(OutStream.write, "_sandcell", False):
        return
    owner = contextvars.ContextVar("sandcell_owner", default=None)

    write = OutStream.write

    def owned_write(self, string):
        parent = owner.get()
        if (
            parent
            and isinstance(string, str)
            and self.pub_thread is not None
            and parent.get("msg_id") != self.parent_header.get("msg_id")
            and self._is_master_process()
        ):
            if string:
                self.session.send(
                    self.pub_thread,
                    "stream",
                    content={"name": self.name, "text": string},
                    parent=parent,
                    ident=self.topic,
                )
            return len(string)
        return write(self, string)

    owned_write._sandcell = True
    OutStream.write = owned_write

    set_parent = OutStream.set_parent

    def flushing_set_parent(self, parent):
        # what was written under the old parent is sent under it, not
        # flushed later under the new one
        if _buffered(self):
            self.flush()
        set_parent(self, parent)
        # the kernel's main flow (and what it starts) now works for this request
        owner.set(self.parent_header)

    OutStream.set_parent = flushing_set_parent

    # display() from a thread: the message is built under the current
    # request's parent, and a hook of this thread's own (ipykernel's hooks
    # are thread-local) gives it the owner's before it is sent. Only a
    # display pays for this, not every message the kernel sends.
    from ipykernel.zmqshell import ZMQDisplayPublisher

    publish = ZMQDisplayPublisher.publish

    def owned_publish(self, *args, **kwargs):
        parent = owner.get()
        if not parent or parent.get("msg_id") == (self.parent_header or {}).get("msg_id"):
            return publish(self, *args, **kwargs)

        def reparent(msg):
            msg["parent_header"] = parent
            return msg

        hooks = self._hooks
        hooks.insert(0, reparent)
        try:
            return publish(self, *args, **kwargs)
        finally:
            hooks.remove(reparent)

    if isinstance(getattr(ZMQDisplayPublisher, "_hooks", None), property):
        ZMQDisplayPublisher.publish = owned_publish

    start = threading.Thread.start

    def owned_start(self):
        parent = owner.get()
        if parent:
            run = self.run

            def owned_run():
                owner.set(parent)
                return run()

            self.run = owned_run
        return start(self)

    threading.Thread.start = owned_start


def _interrupted(shell, etype, value, tb, tb_offset=None):
    """A KeyboardInterrupt's traceback, plain: IPython's coloured one with
    source context takes 10 to 80 ms to build, and an interrupt is how a
    cancelled or timed-out execution ends, with the next one waiting for it.
    The first frame is IPython's own run_code."""
    import traceback

    if tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    stb = [s.rstrip("\n") for s in traceback.format_exception(etype, value, tb)]
    shell._showtraceback(etype, value, stb)
    return stb


def _capture_fds(ip):
    """Output written to fds 1 and 2 (os.write, subprocesses) reaches the
    streams through a pipe of ours, and what was written there before an
    execution ended is in its output: at its end the pipes are checked, and
    waited on (50 ms at most) until the reader has taken what they held, as
    it otherwise may only after the reply, for the next execution or none. ipykernel's own reader thread decodes
    each 1000-byte read as strict UTF-8, so one undecodable byte (or a
    character cut by the read) kills it: later fd output is lost and a writer
    of more than a pipe's worth blocks for good. Ours decodes incrementally,
    replacing what is not UTF-8 with U+FFFD, and never stops draining.
    ipykernel's thread is left blocked on its old pipe, which nobody writes.

    A str that cannot be encoded (a lone surrogate) is refused at write(), as
    a UTF-8 terminal refuses it, instead of failing later in the kernel's
    sending thread with a long internal traceback and the output lost. And
    the stream is flushed each FLUSH_AT characters, so no kernel message
    grows with the output (ipykernel sends what 0.2 s gathered as one)."""
    import threading

    from ipykernel.iostream import OutStream

    pipes = []
    for fd, stream in ((1, sys.stdout), (2, sys.stderr)):
        if not isinstance(stream, OutStream) or not hasattr(stream, "watch_fd_thread"):
            continue
        r, w = os.pipe()
        os.dup2(w, fd)  # fd stays inheritable: subprocesses write to it
        os.close(w)
        _end_watcher(stream)
        lock = threading.Lock()  # held from a read to the write of what it read
        pipes.append((r, lock))
        threading.Thread(
            target=_pump, args=(r, stream, lock), name="sandcell-fd%d" % fd, daemon=True
        ).start()
    if pipes:
        import array
        import fcntl
        import termios
        import time

        def drain():
            _drain_fds(pipes, fcntl.ioctl, termios.FIONREAD, array.array("i", [0]), time)

        ip.events.register("post_execute", drain)

    write = OutStream.write

    def bounded_write(self, string):
        if isinstance(string, str) and not string.isascii():
            string.encode("utf-8")  # UnicodeEncodeError: surrogates not allowed
        if len(string) <= FLUSH_AT:
            n = write(self, string)
            if _buffered(self) >= FLUSH_AT:
                self.flush()
            return n
        for i in range(0, len(string), FLUSH_AT):
            write(self, string[i : i + FLUSH_AT])
            self.flush()
        return len(string)

    OutStream.write = bounded_write



def _quick_flush():
    """A flush of a stream that holds nothing returns at once. ipykernel's
    waits for a round trip through its sending thread whatever the stream
    holds, and the kernel flushes stdout and stderr at the end of every
    execution: two hand-offs between threads each time, ~10 % of a short
    execution's CPU (make bench BENCH=kcpu). What was handed to that thread
    earlier goes before the execution's idle status all the same (one queue,
    one socket), and the proxy ends an execution on that idle."""
    from ipykernel.iostream import OutStream

    flush = OutStream.flush
    if getattr(flush, "_sandcell", False):
        return

    def quick_flush(self):
        try:
            empty = getattr(self, "echo", None) is None and not _buffered(self)
        except Exception:  # an ipykernel whose streams hold text otherwise
            empty = False
        return None if empty else flush(self)

    quick_flush._sandcell = True
    OutStream.flush = quick_flush


def _quiet_log(ip):
    """The kernel's logger at the lowest level any of its handlers takes:
    traitlets sets the logger to DEBUG and its handler to the app's level
    (WARN), so each of ipykernel's four debug calls per execution built a
    record that no handler took (~8 us each). Nothing logged is lost."""
    import logging

    log = getattr(getattr(ip, "kernel", None), "log", None)
    if not isinstance(log, logging.Logger):
        return
    levels, at = [], log
    while at is not None:
        levels += [h.level for h in at.handlers]
        if not at.propagate:
            break
        at = at.parent
    if levels and min(levels) > log.getEffectiveLevel():
        log.setLevel(min(levels))


def _end_watcher(stream):
    """ipykernel's reader of the fd, now that fd is ours: its pipe's write
    end (ipykernel keeps it open, under no name) is closed, so that the
    thread reads the end of its pipe and returns instead of blocking for
    good. A thread less, its stack and its malloc arena, in every kernel."""
    import fcntl
    import stat

    rfd = getattr(stream, "_fid", None)
    thread = getattr(stream, "watch_fd_thread", None)
    if not isinstance(rfd, int) or thread is None:
        return
    try:
        ino = os.fstat(rfd).st_ino
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            if fd == rfd or fd <= 2:
                continue
            try:
                st = os.fstat(fd)
                flags = fcntl.fcntl(fd, fcntl.F_GETFL)
            except OSError:
                continue
            mine = stat.S_ISFIFO(st.st_mode) and st.st_ino == ino
            if mine and flags & os.O_ACCMODE == os.O_WRONLY:
                os.close(fd)
    except OSError:
        pass


def _buffered(stream):
    """How much an OutStream holds unsent: one buffer up to ipykernel 6.28,
    one per parent from 6.29 (Debian 13)."""
    buffers = getattr(stream, "_buffers", None)
    if buffers is not None:
        return sum(b.tell() for b in list(buffers.values()))
    return stream._buffer.tell()

def _iopub_flow_control(ip):
    """A PUB socket drops what its subscriber cannot take yet; with NODROP
    the kernel's sending thread waits instead. sandcell's proxy reads a
    kernel's messages only as it relays them, so a flood of output slows the
    code that makes it rather than being dropped. Set on the socket's own
    thread."""
    import zmq

    thread = getattr(getattr(ip, "kernel", None), "iopub_thread", None)
    sock = getattr(thread, "socket", None)
    if sock is not None:
        thread.schedule(lambda: sock.setsockopt(zmq.XPUB_NODROP, 1))


def _pump(fd, stream, lock):
    import codecs
    import select

    decode = codecs.getincrementaldecoder("utf-8")("replace").decode
    ready = select.poll()
    ready.register(fd, select.POLLIN)
    while True:
        try:
            ready.poll()
        except OSError:
            return
        with lock:
            try:
                data = os.read(fd, 65536)
            except OSError:
                return
            if not data:
                return
            try:
                stream.write(decode(data))
            except Exception:  # a closed stream at shutdown: keep draining
                pass


def _drain_fds(pipes, ioctl, fionread, held, time):
    """At an execution's end: until each pipe is empty with its reader idle,
    every byte written to it so far is in the stream (50 ms at most)."""
    deadline = time.monotonic() + 0.05
    for r, lock in pipes:
        while True:
            if not lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
                return
            try:
                ioctl(r, fionread, held)
            except OSError:
                held[0] = 0
            finally:
                lock.release()
            if not held[0] or time.monotonic() >= deadline:
                break
            time.sleep(0.0002)


def _quietly(fallback):
    """A formatter's printer never raises nor warns: on failure it returns
    fallback() (no representation, or a minimal one)."""
    import warnings

    def wrap(f):
        @functools.wraps(f)
        def printer(obj):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    return f(obj)
            except Exception:
                return fallback()

        return printer

    return wrap


def _is_a(obj, module, name):
    return any(c.__module__ == module and c.__name__ == name for c in type(obj).__mro__)


def _quiet_matplotlib():
    """Keeps matplotlib's one-time set-up notices (font cache being built,
    temporary config dir) off the user's stderr; the logger exists before
    matplotlib does, so nothing is imported."""
    import logging

    notices = ("Matplotlib is building the font cache", "Matplotlib created a temporary")

    def drop(record):
        return not (isinstance(record.msg, str) and record.msg.startswith(notices))

    for name in ("matplotlib", "matplotlib.font_manager"):
        logging.getLogger(name).addFilter(drop)


# ---- plain JSON values ----------------------------------------------------


def _plain(v):
    """v as a strict JSON value: numpy scalars as numbers, NaN/NaT/NA as null,
    dates and times as ISO strings, anything unknown as its str()."""
    t = type(v)
    if v is None or t is str or t is bool or t is int:
        return v
    if t is float:
        return v if math.isfinite(v) else None
    if t.__name__ in ("NAType", "NaTType"):
        return None
    if isinstance(v, bool):
        return bool(v)
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return float(v) if math.isfinite(v) else None
    if isinstance(v, (datetime.date, datetime.time)):
        return v.isoformat()
    if isinstance(v, str):
        return str(v)
    if t.__module__ == "numpy":
        return _plain_numpy(v)
    if isinstance(v, datetime.timedelta):
        iso = getattr(v, "isoformat", None)  # pandas Timedelta: ISO 8601 duration
        return iso() if iso else str(v)
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).decode("utf-8", "replace")
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set, frozenset)):
        return [_plain(x) for x in v]
    if t.__name__ == "Decimal":
        return _plain(float(v))
    if hasattr(v, "to_timestamp"):  # pandas Period
        return _plain(v.to_timestamp())
    if hasattr(v, "tolist"):  # numpy arrays inside object cells
        return _plain(v.tolist())
    return str(v)


def _plain_numpy(v):
    name = type(v).__name__
    if name == "datetime64":
        if v != v:
            return None
        d = v.astype("datetime64[us]").item()  # ns would give an int
        return d.isoformat() if isinstance(d, datetime.datetime) else str(v)
    if name == "timedelta64":
        return None if v != v else str(v)
    if hasattr(v, "tolist"):
        return _plain(v.tolist())
    return str(v)


@_quietly(lambda: None)
def plain_json(obj):
    """application/json for a list or dict that is JSON as it stands."""
    if type(obj) not in (list, dict):
        own = getattr(type(obj), "_repr_json_", None)
        if own is not None:
            return own(obj)
    return json.loads(json.dumps(obj, allow_nan=False))


# ---- DataFrame ------------------------------------------------------------


@_quietly(lambda: None)
def dataframe_data(df):
    """{column: [values]}; named index levels lead, as reset_index() would
    put them (a groupby's keys), unless a column has the same name."""
    if df.size > MAX_DATA_CELLS:
        return None
    columns = {}
    for j, name in enumerate(df.columns):
        key, n = _column_name(name), 1
        while key in columns:  # duplicate names: a, a.1, a.2
            key, n = "%s.%d" % (_column_name(name), n), n + 1
        columns[key] = [_plain(v) for v in df.iloc[:, j].tolist()]
    index = {}
    for level, name in enumerate(df.index.names):
        if name is not None and _column_name(name) not in columns:
            values = df.index.get_level_values(level).tolist()
            index[_column_name(name)] = [_plain(v) for v in values]
    index.update(columns)
    return index


def _column_name(name):
    if isinstance(name, tuple):  # MultiIndex columns: ('b', 'mean') -> b_mean
        return "_".join(str(p) for p in name if p != "")
    return str(name)


# ---- matplotlib Figure ----------------------------------------------------


@_quietly(lambda: None)
def figure_png(fig):
    from IPython.core.pylabtools import print_figure

    return print_figure(fig, "png", base64=True)


@_quietly(lambda: dict(UNKNOWN))
def figure_chart(fig):
    """The chart a Figure shows; one Axes gives its chart, several a
    superchart (colorbars aside). A failure gives an `unknown` chart."""
    axes = [ax for ax in fig.get_axes() if ax.get_visible()]
    axes = [ax for ax in axes if not hasattr(ax, "_colorbar")] or axes
    if not axes:
        return None
    suptitle = getattr(fig, "_suptitle", None)
    suptitle = suptitle.get_text() if suptitle is not None else ""
    if len(axes) == 1:
        chart = axes_chart(axes[0])
        if not chart.get("title"):
            chart["title"] = suptitle or None
    else:
        chart = {
            "type": "superchart",
            "title": suptitle,
            "elements": [axes_chart(ax) for ax in axes],
        }
    chart = _plain(chart)  # any numpy scalar or NaN left becomes plain JSON
    json.dumps(chart, allow_nan=False)
    return chart


def axes_chart(ax):
    try:
        kind, parts = classify(ax)
        build = {
            "line": _line_chart,
            "scatter": _scatter_chart,
            "bar": _bar_chart,
            "pie": _pie_chart,
            "box_and_whisker": _box_chart,
        }.get(kind)
        if build is not None:
            return build(ax, parts)
    except Exception:
        pass
    try:
        return {"type": "unknown", "title": _title(ax), "elements": []}
    except Exception:
        return dict(UNKNOWN)


def classify(ax):
    """The chart kind of an Axes, from its artists: Line2D -> line,
    PathCollection -> scatter, bar()'s Rectangles -> bar, Wedge -> pie,
    bxp()'s artists -> box_and_whisker. Decorations are ignored (texts,
    legends, error bars, axhline/axvline, fill_between bands); two kinds, or
    anything else (images, meshes, polygons) on the Axes, give unknown."""
    from matplotlib.collections import PathCollection, PolyCollection
    from matplotlib.container import BarContainer, ErrorbarContainer
    from matplotlib.patches import Shadow, Wedge

    found = {k: [] for k in ("line", "scatter", "bar", "pie", "box_and_whisker", "other")}
    boxes, seen = found["box_and_whisker"], set()
    ignored, bar_rects = set(), set()
    for c in ax.containers:
        if isinstance(c, BarContainer):
            found["bar"].append(c)
            bar_rects.update(id(p) for p in c.patches)
        elif isinstance(c, ErrorbarContainer):
            _, caps, cols = c.lines
            ignored.update(id(a) for a in list(caps) + list(cols))

    def box_group(artist):
        group = getattr(artist, "_sandcell_box", None)
        if group is not None and id(group) not in seen:
            seen.add(id(group))
            boxes.extend(group)
        return group is not None

    for a in ax.lines:
        if box_group(a) or id(a) in ignored or not _in_data_coords(ax, a):
            continue
        found["line"].append(a)
    for a in ax.patches:
        if box_group(a) or id(a) in bar_rects or isinstance(a, Shadow):
            continue
        found["pie" if isinstance(a, Wedge) else "other"].append(a)
    for a in ax.collections:
        if id(a) in ignored or (isinstance(a, PolyCollection) and found["line"]):
            continue
        found["scatter" if isinstance(a, PathCollection) else "other"].append(a)
    found["other"].extend(ax.images)

    if found["bar"]:  # seaborn draws confidence intervals as 2-point lines
        found["line"] = [a for a in found["line"] if not _is_segment(a)]
    kinds = [k for k, v in found.items() if v]
    if len(kinds) != 1 or kinds[0] == "other":
        return "unknown", None
    return kinds[0], found[kinds[0]]


def _in_data_coords(ax, artist):
    t = artist.get_transform()
    return t is ax.transData or t == ax.transData


def _is_segment(line):
    xy = line.get_xydata()
    return len(xy) == 2 and (xy[0][0] == xy[1][0] or xy[0][1] == xy[1][1])


def _title(ax):
    """The Axes' title, or None (E2B sends no empty title or axis label;
    a superchart's title is the figure's suptitle as it is, "" included)."""
    for loc in ("center", "left", "right"):
        t = ax.get_title(loc)
        if t:
            return t
    return None


class Axis:
    """One axis of an Axes: its label, unit, scale, ticks, and how its
    internal float values read (ISO dates, category names, numbers)."""

    UNIT = re.compile(r"(?:^|\s)\(([^()]+)\)|\[([^\[\]]+)\]")

    def __init__(self, ax, which):
        from matplotlib.category import StrCategoryConverter
        from matplotlib.dates import DateConverter
        from matplotlib.ticker import FixedLocator

        self.axis = ax.xaxis if which == "x" else ax.yaxis
        self.label = self.axis.get_label().get_text()
        m = self.UNIT.search(self.label)
        self.unit = (m.group(1) or m.group(2)) if m else None
        get = getattr(self.axis, "get_converter", None)  # matplotlib >= 3.10
        conv = get() if get else getattr(self.axis, "converter", None)
        self.freq = None  # pandas period axes count periods, not days
        if type(conv).__name__ == "PeriodConverter":
            self.freq = getattr(self.axis, "freq", None)
        self.locs, self.labels = self._ticks()
        fmt = self.axis.get_major_formatter()
        # Ticks placed one by one (set_xticks: pandas, seaborn, bxp) name
        # the things drawn at them.
        self.by_ticks = isinstance(self.axis.get_major_locator(), FixedLocator)
        if isinstance(conv, DateConverter) or type(conv).__name__ == "_SwitchableDateConverter":
            self.scale = "datetime"
        elif isinstance(conv, StrCategoryConverter):
            self.scale = "categorical"
        else:
            self.scale = self.axis.get_scale()
            if self.by_ticks and not all(map(_is_number, self.labels)):
                self.scale = "categorical"
        self.names = fmt if type(fmt).__name__ == "StrCategoryFormatter" else None

    def _ticks(self):
        lo, hi = sorted(self.axis.get_view_interval())
        locs = [float(v) for v in self.axis.get_majorticklocs()]
        try:
            labels = [str(s) for s in self.axis.get_major_formatter().format_ticks(locs)]
        except Exception:
            labels = [t.get_text() for t in self.axis.get_majorticklabels()]
        labels = (labels + [""] * len(locs))[: len(locs)]
        slack = abs(hi - lo) * 1e-9
        keep = [i for i, v in enumerate(locs) if lo - slack <= v <= hi + slack]
        return [locs[i] for i in keep], [labels[i] for i in keep]

    def value(self, v):
        """An internal (converted) value as the user would read it."""
        v = float(v)
        if not math.isfinite(v):
            return None
        if self.scale == "datetime":
            return self._date(v)
        if self.names is not None and v == round(v):
            return self.names.format_ticks([v])[0]
        return v

    def _date(self, v):
        try:
            if self.freq is not None:
                import pandas

                return pandas.Period(ordinal=int(round(v)), freq=self.freq).to_timestamp().isoformat()
            from matplotlib.dates import num2date

            d = num2date(v)
            if d.utcoffset() == datetime.timedelta(0):
                d = d.replace(tzinfo=None)
            return d.isoformat()
        except Exception:
            return v

    def ticks(self):
        if self.scale == "datetime":
            return [self._date(v) for v in self.locs]
        return list(self.locs)

    def tick_label(self, at):
        """The label of the tick at position `at`, if the ticks name things."""
        if self.names is not None:
            return self.names.format_ticks([round(at)])[0] or None
        if self.by_ticks and self.locs:
            spacing = min((b - a for a, b in zip(self.locs, self.locs[1:])), default=1.0)
            i = min(range(len(self.locs)), key=lambda i: abs(self.locs[i] - at))
            if abs(self.locs[i] - at) <= max(spacing, 1e-12) / 2:
                return self.labels[i] or None
        return None

    def category(self, at):
        """The name of the category at position `at` (a bar's centre)."""
        label = self.tick_label(at)
        if label:
            return label
        if self.scale == "datetime":
            return str(self._date(at))
        return "%g" % at

    def coords(self, orig, conv):
        """Data values of a line: the user's own values where they read
        well (dates as ISO, strings, ints), else the converted floats."""
        conv = _floats(conv)
        origs = None
        if orig is not None and not isinstance(orig, str):
            try:
                np = sys.modules.get("numpy")
                a = np.asarray(orig) if np is not None else None
                if a is not None and a.ndim == 1 and a.dtype.kind in "iuf" and len(a) == len(conv):
                    if self.scale not in ("datetime", "categorical"):
                        return [_plain(v) for v in a.tolist()]
                origs = list(orig)
            except Exception:
                origs = None
        if origs is None or len(origs) != len(conv):
            return [self.value(c) for c in conv]
        return [self._coord(o, c) for o, c in zip(origs, conv)]

    def _coord(self, o, c):
        if isinstance(o, (datetime.date, datetime.time, str)) or hasattr(o, "to_timestamp"):
            return _plain(o)
        if type(o).__name__ == "datetime64":
            return _plain(o)
        numeric = isinstance(o, (int, float)) or type(o).__module__ == "numpy"
        if numeric and self.scale not in ("datetime", "categorical"):
            return _plain(o)
        return self.value(c)


def _is_number(s):
    try:
        float(str(s).replace("\u2212", "-"))
        return True
    except ValueError:
        return False


def _floats(values):
    np = sys.modules.get("numpy")
    if np is not None:
        a = np.ma.filled(np.ma.asarray(values, dtype=float), np.nan)
        return a.ravel().tolist()
    return [float(v) for v in values]


def _chart_2d(kind, ax, swap=False):
    """The common part of 2D charts. swap: the chart's x is the Axes' y
    (horizontal bars and boxes: x is always the category axis)."""
    x, y = Axis(ax, "x"), Axis(ax, "y")
    if swap:
        x, y = y, x
    chart = {"type": kind, "title": _title(ax)}
    for name, a in (("x", x), ("y", y)):
        chart[name + "_label"] = a.label or None
        chart[name + "_unit"] = a.unit
    for name, a in (("x", x), ("y", y)):
        chart[name + "_ticks"] = a.ticks()
        chart[name + "_tick_labels"] = list(a.labels)
        chart[name + "_scale"] = a.scale
    return chart, x, y


def _series_label(artist, fallback):
    label = artist.get_label()
    return fallback if not isinstance(label, str) or label.startswith("_") else label


def _line_chart(ax, lines):
    chart, x, y = _chart_2d("line", ax)
    chart["elements"] = []
    for i, line in enumerate(lines):
        xs = x.coords(line.get_xdata(orig=True), line.get_xdata(orig=False))
        ys = y.coords(line.get_ydata(orig=True), line.get_ydata(orig=False))
        points = [[a, b] for a, b in zip(xs, ys)]
        chart["elements"].append({"label": _series_label(line, "Line %d" % i), "points": points})
    return chart


def _scatter_chart(ax, collections):
    chart, x, y = _chart_2d("scatter", ax)
    chart["elements"] = []
    for i, c in enumerate(collections):
        offsets = c.get_offsets()
        xs = [x.value(v) for v in _floats(offsets[:, 0])] if len(offsets) else []
        ys = [y.value(v) for v in _floats(offsets[:, 1])] if len(offsets) else []
        points = [[a, b] for a, b in zip(xs, ys)]
        chart["elements"].append({"label": _series_label(c, "Series %d" % i), "points": points})
    return chart


def _bar_chart(ax, containers):
    horizontal = getattr(containers[0], "orientation", None) == "horizontal"
    chart, x, _ = _chart_2d("bar", ax, swap=horizontal)
    chart["elements"] = []
    for n, c in enumerate(containers):
        group = _series_label(c, "Group %d" % n)
        values = getattr(c, "datavalues", None)
        for i, r in enumerate(c.patches):
            if horizontal:
                at, size = r.get_y() + r.get_height() / 2, r.get_width()
            else:
                at, size = r.get_x() + r.get_width() / 2, r.get_height()
            value = values[i] if values is not None and i < len(values) else size
            chart["elements"].append({"label": x.category(at), "value": _plain(value), "group": group})
    return chart


def _pie_chart(ax, wedges):
    chart = {"type": "pie", "title": _title(ax), "elements": []}
    for w in wedges:
        chart["elements"].append(
            {
                "label": str(w.get_label()),
                "angle": round(abs(float(w.theta2) - float(w.theta1)), 4),
                "radius": _plain(w.r),
            }
        )
    return chart


def _box_chart(ax, boxes):
    horizontal = boxes[0]["horizontal"]
    chart, x, _ = _chart_2d("box_and_whisker", ax, swap=horizontal)
    chart["elements"] = []
    for b in boxes:
        label = x.tick_label(b["position"]) or b["label"] or "%g" % b["position"]
        chart["elements"].append(
            {
                "label": str(label),
                "min": _plain(b["min"]),
                "first_quartile": _plain(b["q1"]),
                "median": _plain(b["med"]),
                "third_quartile": _plain(b["q3"]),
                "max": _plain(b["max"]),
                "outliers": [_plain(v) for v in b["outliers"]],
            }
        )
    return chart


# ---- patches applied when a module is first imported ----------------------


class PatchFinder:
    """A meta path finder that finds nothing itself: for the modules it
    knows, it wraps the real loader's exec_module so the patch runs right
    after the module has loaded."""

    def __init__(self, patches):
        self.patches = patches
        for name, patch in patches.items():  # already imported: patch now
            if name in sys.modules:
                _apply(patch, sys.modules[name])

    def find_spec(self, name, path=None, target=None):
        patch = self.patches.get(name)
        if patch is None:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        # only a loader instance of its own: a class (builtin, frozen) is shared
        if loader is None or isinstance(loader, type) or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_and_patch(module):
            try:
                exec_module(module)
            finally:
                try:
                    del loader.exec_module
                except AttributeError:
                    pass
            _apply(patch, module)

        try:
            loader.exec_module = exec_and_patch
        except AttributeError:
            pass
        return spec


def _apply(patch, module):
    try:
        patch(module)
    except Exception:
        pass


def _display_image(image):
    """Shows a PIL image as a png result; an image PNG cannot hold is
    converted first, and one that still fails is not shown."""
    try:
        import base64
        import io

        from IPython.display import display

        buf = io.BytesIO()
        try:
            image.save(buf, "PNG")
        except Exception:
            buf = io.BytesIO()
            image.convert("RGBA").save(buf, "PNG")
        png = base64.b64encode(buf.getvalue()).decode("ascii")
        display({"image/png": png, "text/plain": repr(image)}, raw=True)
    except Exception:
        pass


def _patch_pil_image(mod):
    cls = mod.Image
    if getattr(cls.save, "_sandcell", False):
        return
    save = cls.save

    @functools.wraps(save)
    def save_and_display(self, fp, format=None, **params):
        save(self, fp, format, **params)
        # Only a save to a file by the user's code: not the BytesIO of a
        # png repr, nor matplotlib's savefig (which writes through PIL).
        if isinstance(fp, (str, bytes, os.PathLike)):
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if not caller.startswith(("matplotlib", "PIL")):
                _display_image(self)

    def show(self, title=None):
        _display_image(self)

    save_and_display._sandcell = True
    cls.save = save_and_display
    cls.show = show


def _patch_pil_imageshow(mod):
    def show(image, title=None, **options):
        _display_image(image)
        return True

    mod.show = show


def _patch_bxp(mod):
    """Tags the artists Axes.bxp() draws (boxplot, pandas, seaborn all come
    through it) with the statistics they show, so a chart reports the real
    quartiles rather than reading them back from the lines."""
    import inspect

    cls = mod.Axes
    bxp = cls.bxp
    if getattr(bxp, "_sandcell", False):
        return
    sig = inspect.signature(bxp)

    @functools.wraps(bxp)
    def tagged_bxp(self, *args, **kwargs):
        artists = bxp(self, *args, **kwargs)
        try:
            _tag_boxes(sig.bind(self, *args, **kwargs).arguments, artists)
        except Exception:
            pass
        return artists

    tagged_bxp._sandcell = True
    cls.bxp = tagged_bxp


def _tag_boxes(args, artists):
    stats = list(args["bxpstats"])
    positions = args.get("positions")
    if positions is None:
        positions = range(1, len(stats) + 1)
    horizontal = args.get("vert", True) is False or args.get("orientation") == "horizontal"
    group = []
    for s, pos in zip(stats, positions):
        group.append(
            {
                "label": s.get("label"),
                "position": float(pos),
                "horizontal": horizontal,
                "min": s["whislo"],
                "q1": s["q1"],
                "med": s["med"],
                "q3": s["q3"],
                "max": s["whishi"],
                "outliers": list(s.get("fliers", [])),
            }
        )
    for drawn in artists.values():
        for a in drawn:
            a._sandcell_box = group

/*
 * SandcellJShell — the JVM half of sandcell's Java kernel: one jdk.jshell
 * session on the "local" execution engine (user code runs in this JVM, so
 * its state persists), serving the cells java_kernel.py sends.
 *
 * Requests come from the file named by args[0] (a pipe; stdin is /dev/null,
 * so neither user code nor its children can read them):
 *   "X <n>\n" and n bytes of UTF-8 code   run a cell
 *   "S\n"                                 stop the cell being run (interrupt)
 * User output goes to fd 1 and 2 while the cell runs. After each cell, and
 * once at start when warm, the end marker follows on both: on stdout
 * "\x1eSANDCELL-END " + a JSON object + "\x1e", on stderr "\x1eSANDCELL-END\x1e".
 */
import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodType;
import java.lang.reflect.Array;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileSystems;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.stream.Collectors;

import jdk.jshell.DeclarationSnippet;
import jdk.jshell.Diag;
import jdk.jshell.EvalException;
import jdk.jshell.JShell;
import jdk.jshell.JShellException;
import jdk.jshell.Snippet;
import jdk.jshell.SnippetEvent;
import jdk.jshell.SourceCodeAnalysis;
import jdk.jshell.UnresolvedReferenceException;

public final class SandcellJShell {
    private static final String END = "\u001eSANDCELL-END";
    /* what the jshell tool imports at start (its DEFAULT start-up) */
    private static final String[] IMPORTS = {"java.io.*", "java.math.*", "java.net.*",
        "java.nio.file.*", "java.util.*", "java.util.concurrent.*", "java.util.function.*",
        "java.util.prefs.*", "java.util.regex.*", "java.util.stream.*"};

    private record Cell(long seq, String code) {}

    private final FileOutputStream rawOut = new FileOutputStream(FileDescriptor.out);
    private final FileOutputStream rawErr = new FileOutputStream(FileDescriptor.err);
    private final PrintStream out = stream(rawOut), err = stream(rawErr);
    private final BlockingQueue<Cell> cells = new LinkedBlockingQueue<>();
    private JShell shell;
    private volatile long running; /* seq of the cell being run, 0 between cells */
    private volatile long stopSeq; /* the last cell a stop was asked for */
    private long lastSeq;          /* the reader's count of cells */
    private String cwd = System.getProperty("user.dir");

    public static void main(String[] args) throws Exception {
        new SandcellJShell().serve(args[0]);
    }

    /*
     * Buffered, flushed by watch() every 50 ms and at the end of a cell: live
     * enough, and a loop of println is not a write(2) per line. A
     * System.out.close() in a cell only flushes: output goes on working.
     */
    private static PrintStream stream(FileOutputStream fd) {
        return new PrintStream(new BufferedOutputStream(fd, 65536), false, StandardCharsets.UTF_8) {
            @Override
            public void close() {
                flush();
            }
        };
    }

    private void serve(String requests) throws Exception {
        globalEnvAsProperties();
        InputStream in = new FileInputStream(requests);
        System.setOut(out);
        System.setErr(err);
        System.setIn(new ByteArrayInputStream(new byte[0]));
        shell = JShell.builder().executionEngine("local").in(System.in).out(out).err(err).build();
        String cp = System.getenv("CLASSPATH");
        if (cp != null)
            for (String e : cp.split(File.pathSeparator))
                if (!e.isEmpty())
                    shell.addToClasspath(e);
        for (String i : IMPORTS)
            shell.eval("import " + i + ";");
        shell.eval("{ }"); /* compiles and runs a statement: the first cell is not the slow one */
        daemon("sandcell-requests", () -> read(in));
        daemon("sandcell-watch", this::watch);
        Map<String, Object> ready = new LinkedHashMap<>();
        ready.put("status", "ok");
        ready.put("version", Runtime.version().toString());
        ready.put("feature", Runtime.version().feature());
        ready.put("cwd", cwd);
        end(ready);
        for (;;)
            run(cells.take());
    }

    /* The global (--env) variables are system properties too, as in E2B. */
    private static void globalEnvAsProperties() {
        String names = System.getProperty("sandcell.global.env");
        if (names == null)
            return;
        System.clearProperty("sandcell.global.env");
        for (String k : names.split(",")) {
            String v = k.isEmpty() ? null : System.getenv(k);
            if (v != null)
                System.setProperty(k, v);
        }
    }

    private static void daemon(String name, Runnable r) {
        Thread t = new Thread(r, name);
        t.setDaemon(true);
        t.start();
    }

    /* The request reader. The wrapper gone (EOF) ends this JVM, busy or not. */
    private void read(InputStream raw) {
        try (InputStream in = new BufferedInputStream(raw)) {
            String line;
            while ((line = readLine(in)) != null) {
                if (line.equals("S")) {
                    stopSeq = lastSeq;
                    stop();
                } else if (line.startsWith("X ")) {
                    int n = Integer.parseInt(line.substring(2));
                    byte[] code = in.readNBytes(n);
                    if (code.length < n)
                        break;
                    cells.put(new Cell(++lastSeq, new String(code, StandardCharsets.UTF_8)));
                } else {
                    break;
                }
            }
        } catch (Exception e) {
            /* a broken request channel ends the JVM like EOF */
        }
        Runtime.getRuntime().halt(0);
    }

    private static String readLine(InputStream in) throws IOException {
        ByteArrayOutputStream b = new ByteArrayOutputStream();
        int c;
        while ((c = in.read()) != '\n') {
            if (c < 0)
                return null;
            b.write(c);
        }
        return b.toString(StandardCharsets.US_ASCII);
    }

    /*
     * Flushes output, and repeats a stop while the cell runs: one that came
     * during compilation found no user code to stop.
     */
    private void watch() {
        for (;;) {
            try {
                Thread.sleep(50);
            } catch (InterruptedException e) {
                return;
            }
            out.flush();
            err.flush();
            long r = running;
            if (r != 0 && stopSeq >= r)
                stop();
        }
    }

    private void stop() {
        try {
            shell.stop();
        } catch (Exception e) {
            /* nothing running, or the shell is closed */
        }
    }

    private boolean stopped(Cell c) {
        return stopSeq >= c.seq;
    }

    private void run(Cell c) {
        Map<String, Object> reply;
        running = c.seq;
        try {
            reply = runCell(c);
        } catch (Throwable t) {
            String v = "sandcell's JShell server failed: " + t;
            reply = error("InternalError", v, List.of(v));
        } finally {
            running = 0;
        }
        if (stopped(c)) {
            reply = new LinkedHashMap<>();
            reply.put("status", "stopped");
        }
        applyCwd();
        reply.put("cwd", cwd);
        end(reply);
    }

    /*
     * Splits the cell into snippets and evaluates them in order, stopping at
     * the first error. The value of a last snippet that is an expression is
     * the cell's result.
     */
    private Map<String, Object> runCell(Cell c) {
        SourceCodeAnalysis sca = shell.sourceCodeAnalysis();
        String rest = c.code, result = null;

        while (!stopped(c)) {
            int at = c.code.length() - rest.length();
            SourceCodeAnalysis.CompletionInfo ci = sca.analyzeCompletion(rest);
            if (ci.completeness() == SourceCodeAnalysis.Completeness.EMPTY)
                break;
            String src = ci.source();
            if (src == null || ci.remaining().length() >= rest.length()) {
                src = rest; /* incomplete: its evaluation reports why */
                rest = "";
            } else {
                rest = ci.remaining();
            }
            result = null;
            SnippetEvent ev = null;
            for (SnippetEvent e : shell.eval(src))
                if (e.causeSnippet() == null)
                    ev = e;
            applyCwd(); /* the next snippet sees a directory this one set */
            if (ev == null || stopped(c))
                continue;
            Snippet sn = ev.snippet();
            if (ev.status() == Snippet.Status.REJECTED)
                return compileError(sn, c.code, at);
            if (ev.exception() != null)
                return exception(ev.exception());
            if (sn instanceof DeclarationSnippet ds &&
                (ev.status() == Snippet.Status.RECOVERABLE_DEFINED ||
                 ev.status() == Snippet.Status.RECOVERABLE_NOT_DEFINED))
                note(ds);
            if (sn.subKind() == Snippet.SubKind.TEMP_VAR_EXPRESSION_SUBKIND ||
                sn.subKind() == Snippet.SubKind.VAR_VALUE_SUBKIND)
                result = ev.value();
        }
        Map<String, Object> ok = new LinkedHashMap<>();
        ok.put("status", "ok");
        if (result != null)
            ok.put("result", result);
        return ok;
    }

    /* A definition that waits for others (RECOVERABLE_*): say so, as jshell does. */
    private void note(DeclarationSnippet ds) {
        String deps = shell.unresolvedDependencies(ds).collect(Collectors.joining(", "));
        if (!deps.isEmpty())
            err.println("note: " + ds.name() + " cannot be used until " + deps + " is declared");
    }

    private static Map<String, Object> error(String ename, String evalue, List<String> tb) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("status", "error");
        m.put("ename", ename);
        m.put("evalue", evalue);
        m.put("traceback", tb);
        return m;
    }

    /* Errors of a rejected snippet, with the cell's line and a caret under the spot. */
    private Map<String, Object> compileError(Snippet sn, String code, int at) {
        String src = sn.source();
        String bare = src.endsWith(";") ? src.substring(0, src.length() - 1) : src;
        int start = bare.isEmpty() ? -1 : code.indexOf(bare, at);
        List<String> msgs = new ArrayList<>(), tb = new ArrayList<>();

        for (Diag d : shell.diagnostics(sn).collect(Collectors.toList())) {
            if (!d.isError())
                continue;
            int pos = (int) Math.max(0, Math.min(d.getPosition(), src.length()));
            /* "location: class" with no name is JShell's wrapper: noise */
            String msg = d.getMessage(null).replaceAll("\n\\s*location: class\\s*(?=\n|$)", "");
            if (start >= 0) {
                int line = lineOf(code, start + Math.min(pos, bare.length())) + 1;
                msg = "line " + line + ": " + msg;
            }
            msgs.add(msg);
            tb.add(msg);
            int ls = src.lastIndexOf('\n', pos - 1) + 1, le = src.indexOf('\n', pos);
            tb.add(src.substring(ls, le < 0 ? src.length() : le));
            tb.add(" ".repeat(pos - ls) + "^");
        }
        if (msgs.isEmpty())
            msgs.add("the snippet was rejected: " + src);
        return error("CompilationError", String.join("\n", msgs), tb);
    }

    private static int lineOf(String s, int pos) {
        int n = 0;
        for (int i = 0; i < pos && i < s.length(); i++)
            if (s.charAt(i) == '\n')
                n++;
        return n;
    }

    private Map<String, Object> exception(JShellException ex) {
        if (ex instanceof UnresolvedReferenceException ure) {
            DeclarationSnippet ds = ure.getSnippet();
            String deps = shell.unresolvedDependencies(ds).collect(Collectors.joining(", "));
            String n = "UnresolvedReferenceException";
            String v = "attempted to use " + ds.name() + " which cannot be used until " + deps +
                       " is declared";
            return error(n, v, List.of(n + ": " + v));
        }
        String cls = ex instanceof EvalException ee ? className(ee) : ex.getClass().getName();
        List<String> tb = new ArrayList<>();
        trace(ex, tb, "");
        String simple = cls.substring(cls.lastIndexOf('.') + 1);
        return error(simple, ex.getMessage() == null ? "" : ex.getMessage(), tb);
    }

    /* REPL.$JShell$14$MyError, a class the user declared, reads MyError. */
    private static String className(EvalException e) {
        return e.getExceptionClassName().replaceFirst("^REPL\\.\\$JShell\\$\\d+[A-Z]?\\$", "");
    }

    /*
     * Java's layout, frames of snippets as jshell shows them ("f (#12:3)":
     * snippet 12, its line 3). JShell has already cut its own machinery off.
     */
    private static void trace(Throwable t, List<String> tb, String caused) {
        String cls = t instanceof EvalException ee ? className(ee) : t.getClass().getName();
        tb.add(caused + cls + (t.getMessage() != null ? ": " + t.getMessage() : ""));
        for (StackTraceElement e : t.getStackTrace()) {
            String f = e.getFileName();
            if (f == null || !f.startsWith("#")) {
                tb.add("\tat " + e);
                continue;
            }
            String cn = e.getClassName(), m = e.getMethodName();
            tb.add("\tat " + (cn.isEmpty() ? "" : cn + ".") + (m.isEmpty() ? "" : m + " ") +
                   "(" + f + ":" + e.getLineNumber() + ")");
        }
        if (t.getCause() != null && t.getCause() != t)
            trace(t.getCause(), tb, "Caused by: ");
    }

    /*
     * A cell that set user.dir moves the JVM there: chdir(2), and the
     * directory java.io.File and java.nio resolve relative paths against.
     * Where this JDK cannot chdir, only the property changes.
     */
    private void applyCwd() {
        String want = System.getProperty("user.dir");
        if (want == null || want.equals(cwd))
            return;
        File dir = new File(want);
        if (!dir.isAbsolute())
            dir = new File(cwd, want);
        String abs;
        try {
            abs = dir.getCanonicalPath();
        } catch (IOException e) {
            abs = dir.getAbsolutePath();
        }
        int rc = dir.isDirectory() ? Chdir.chdir(abs) : -1;
        if (rc < 0) {
            err.println("user.dir: cannot change the working directory to " + want +
                        "; it stays " + cwd);
            err.flush();
            System.setProperty("user.dir", cwd);
            return;
        }
        if (rc > 0) {
            cwd = want; /* no chdir here: the property alone */
            return;
        }
        Chdir.resolveAgainst(abs);
        System.setProperty("user.dir", abs);
        cwd = abs;
    }

    /* The end marker on both streams, after everything the cell printed. */
    private void end(Map<String, Object> reply) {
        try {
            System.out.flush();
            System.err.flush();
        } catch (Throwable t) {
            /* the user's own streams */
        }
        try {
            synchronized (out) {
                out.flush();
                rawOut.write((END + " " + json(reply) + "\u001e").getBytes(StandardCharsets.UTF_8));
            }
            synchronized (err) {
                err.flush();
                rawErr.write((END + "\u001e").getBytes(StandardCharsets.UTF_8));
            }
        } catch (IOException e) {
            Runtime.getRuntime().halt(1); /* the wrapper is gone */
        }
    }

    /* JSON, ASCII only: no 0x1e can appear inside the marker. */
    private static String json(Object o) {
        StringBuilder b = new StringBuilder();
        if (o instanceof Map<?, ?> m) {
            b.append('{');
            for (Map.Entry<?, ?> e : m.entrySet()) {
                if (b.length() > 1)
                    b.append(',');
                b.append(json(e.getKey().toString())).append(':').append(json(e.getValue()));
            }
            return b.append('}').toString();
        }
        if (o instanceof List<?> l) {
            b.append('[');
            for (Object e : l) {
                if (b.length() > 1)
                    b.append(',');
                b.append(json(e));
            }
            return b.append(']').toString();
        }
        if (o instanceof Number)
            return o.toString();
        String s = String.valueOf(o);
        b.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\')
                b.append('\\').append(c);
            else if (c >= 0x20 && c < 0x7f)
                b.append(c);
            else if (Character.isSurrogate(c) && !validPair(s, i))
                b.append("\\ufffd");
            else
                b.append(String.format("\\u%04x", (int) c));
        }
        return b.append('"').toString();
    }

    private static boolean validPair(String s, int i) {
        char c = s.charAt(i);
        if (Character.isHighSurrogate(c))
            return i + 1 < s.length() && Character.isLowSurrogate(s.charAt(i + 1));
        return i > 0 && Character.isHighSurrogate(s.charAt(i - 1));
    }

    /*
     * chdir(2) through the JDK's foreign linker: the incubating one of JDK 17
     * (the JVM runs with --add-modules jdk.incubator.foreign there) or
     * java.lang.foreign from JDK 22 on. Reached by reflection, so this file
     * compiles on any JDK; JDKs 18 to 21 only get the property.
     */
    private static final class Chdir {
        private interface Call {
            int chdir(String dir) throws Throwable;
        }

        private static Call call;
        private static boolean tried;

        /* 0 done, -1 failed, 1 not available */
        static int chdir(String dir) {
            if (!tried) {
                tried = true;
                int f = Runtime.version().feature();
                try {
                    call = f == 17 ? incubator() : f >= 22 ? foreign() : null;
                } catch (Throwable t) {
                    call = null;
                }
            }
            if (call == null)
                return 1;
            try {
                return call.chdir(dir) == 0 ? 0 : -1;
            } catch (Throwable t) {
                return -1;
            }
        }

        private static Object layouts(Class<?> layout, Object l) {
            Object a = Array.newInstance(layout, 1);
            Array.set(a, 0, l);
            return a;
        }

        private static Call incubator() throws Throwable {
            String p = "jdk.incubator.foreign.";
            Class<?> linker = Class.forName(p + "CLinker");
            Class<?> layout = Class.forName(p + "MemoryLayout");
            Class<?> desc = Class.forName(p + "FunctionDescriptor");
            Class<?> scope = Class.forName(p + "ResourceScope");
            Object sys = linker.getMethod("systemLookup").invoke(null);
            Object sym = ((Optional<?>) Class.forName(p + "SymbolLookup")
                          .getMethod("lookup", String.class).invoke(sys, "chdir")).orElseThrow();
            Object fd = desc.getMethod("of", layout, layout.arrayType())
                    .invoke(null, linker.getField("C_INT").get(null),
                        layouts(layout, linker.getField("C_POINTER").get(null)));
            Class<?> addressable = Class.forName(p + "Addressable");
            MethodHandle mh = (MethodHandle) linker
                .getMethod("downcallHandle", addressable, MethodType.class, desc)
                .invoke(linker.getMethod("getInstance").invoke(null), sym,
                    MethodType.methodType(int.class, Class.forName(p + "MemoryAddress")), fd);
            Method open = scope.getMethod("newConfinedScope");
            Method cstring = linker.getMethod("toCString", String.class, scope);
            Method address = Class.forName(p + "MemorySegment").getMethod("address");
            return dir -> {
                try (AutoCloseable s = (AutoCloseable) open.invoke(null)) {
                    return (int) mh.invoke(address.invoke(cstring.invoke(null, dir, s)));
                }
            };
        }

        private static Call foreign() throws Throwable {
            String p = "java.lang.foreign.";
            Class<?> linkerC = Class.forName(p + "Linker");
            Class<?> layout = Class.forName(p + "MemoryLayout");
            Class<?> desc = Class.forName(p + "FunctionDescriptor");
            Class<?> value = Class.forName(p + "ValueLayout");
            Class<?> option = Class.forName(p + "Linker$Option");
            Class<?> arena = Class.forName(p + "Arena");
            Object linker = linkerC.getMethod("nativeLinker").invoke(null);
            Object lookup = linkerC.getMethod("defaultLookup").invoke(linker);
            Object sym = ((Optional<?>) Class.forName(p + "SymbolLookup")
                          .getMethod("find", String.class).invoke(lookup, "chdir")).orElseThrow();
            Object fd = desc.getMethod("of", layout, layout.arrayType())
                    .invoke(null, value.getField("JAVA_INT").get(null),
                        layouts(layout, value.getField("ADDRESS").get(null)));
            Class<?> segment = Class.forName(p + "MemorySegment");
            MethodHandle mh = (MethodHandle) linkerC
                .getMethod("downcallHandle", segment, desc, option.arrayType())
                .invoke(linker, sym, fd, Array.newInstance(option, 0));
            Method open = arena.getMethod("ofConfined");
            Method cstring = arena.getMethod("allocateFrom", String.class);
            return dir -> {
                try (AutoCloseable a = (AutoCloseable) open.invoke(null)) {
                    return (int) mh.invoke(cstring.invoke(a, dir));
                }
            };
        }

        /* java.io.File and java.nio cache the start directory; point them at dir. */
        static void resolveAgainst(String dir) {
            try {
                for (Field f : File.class.getDeclaredFields())
                    if (f.getType().getName().equals("java.io.FileSystem")) { /* fs, FS */
                        f.setAccessible(true);
                        Object fs = f.get(null);
                        set(fs, "userDir", dir);
                    }
            } catch (Exception e) {
                /* another JDK's layout: File keeps its start directory */
            }
            try {
                Object fs = FileSystems.getDefault();
                String enc = System.getProperty("sun.jnu.encoding", "UTF-8");
                set(fs, "defaultDirectory", dir.getBytes(enc));
            } catch (Exception e) {
                /* java.nio keeps its start directory */
            }
        }

        private static void set(Object o, String field, Object v)
            throws ReflectiveOperationException {
            for (Class<?> k = o.getClass(); k != null; k = k.getSuperclass()) {
                try {
                    Field f = k.getDeclaredField(field);
                    f.setAccessible(true);
                    f.set(o, v);
                    return;
                } catch (NoSuchFieldException e) {
                    continue;
                }
            }
            throw new NoSuchFieldException(field);
        }
    }
}

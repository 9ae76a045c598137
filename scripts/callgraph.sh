#!/bin/sh
# callgraph.sh [DIR [SRC]] — which module calls which, from the objects in DIR
# (default build/broker): each module's undefined symbols (nm -u) against the
# functions the others define (nm --defined-only). The inline functions of
# SRC's headers (default: DIR's last part, broker/) leave no symbol, so they
# are read from the source: an inline is its header's, or the module's whose
# "/* x.c" section of the header declares it; a module whose source names it
# calls that module, and it calls what its body names. Prints "a -> b" lines,
# then the groups of modules that call each other in a circle, if any.
dir=${1:-build/broker}
src=${2:-$(basename "$dir")}
defs=$(mktemp)
trap 'rm -f "$defs"' EXIT
for o in "$dir"/*.o; do
	nm --defined-only "$o" | awk -v m="$(basename "$o" .o)" '$2 == "T" {print $3, m}'
done | sort >"$defs"
for o in "$dir"/*.o; do
	nm -u "$o" | awk '{print $2}' | sort | join - "$defs" |
		awk -v m="$(basename "$o" .o)" '$2 != m {print m, "->", $2}'
done | sort -u | python3 -c '
import sys, collections, glob, os, re
src, defs = sys.argv[1], sys.argv[2]
edges = collections.defaultdict(set)
for line in sys.stdin:
    a, _, b = line.split()
    edges[a].add(b)
# the headers inline functions: no symbol in any object, so from the source
definer = dict(line.split() for line in open(defs))
def code(text):  # comments and strings name no call
    return re.sub(r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\\n])*\"", " ", text, flags=re.S)
mods = {os.path.basename(f)[:-2]: code(open(f).read()) for f in glob.glob(src + "/*.c")}
inline = re.compile(r"static\s+(?:__attribute__\(\(\w+\)\)\s+)?inline\b[^;{(]*?\b(\w+)\s*\([^;{]*?\)\s*\{")
for h in sorted(glob.glob(src + "/*.h")):
    text = open(h).read()
    stem = os.path.basename(h)[:-2]
    for m in inline.finditer(text):
        name, depth, i = m.group(1), 1, m.end()
        while depth and i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        body = code(text[m.end():i])
        sections = re.findall(r"^/\* (\w+)\.c\b", text[:m.start()], re.M)
        owner = sections[-1] if sections else stem if stem in mods else os.path.basename(h)
        for mod, code in mods.items():
            if mod != owner and re.search(r"\b" + name + r"\s*\(", code):
                edges[mod].add(owner)
        for callee in set(re.findall(r"\b(\w+)\s*\(", body)):
            if callee in definer and definer[callee] != owner:
                edges[owner].add(definer[callee])
for a in sorted(edges):
    for b in sorted(edges[a]):
        print(a, "->", b)
index, low, stack, groups = {}, {}, [], []
def visit(v):
    index[v] = low[v] = len(index)
    stack.append(v)
    for w in sorted(edges[v]):
        if w not in index:
            visit(w)
            low[v] = min(low[v], low[w])
        elif w in stack:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        group = []
        while group[-1:] != [v]:
            group.append(stack.pop())
        if len(group) > 1:
            groups.append(sorted(group))
for v in sorted(set(edges) | {w for ws in edges.values() for w in ws}):
    if v not in index:
        visit(v)
print("circles:", "; ".join(" ".join(g) for g in groups) if groups else "none")
' "$src" "$defs"

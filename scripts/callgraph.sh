#!/bin/sh
# callgraph.sh [DIR] — which module calls which, from the objects in DIR
# (default build/broker): each module's undefined symbols (nm -u) against the
# functions the others define (nm --defined-only). Prints "a -> b" lines, then
# the groups of modules that call each other in a circle, if any.
dir=${1:-build/broker}
defs=$(mktemp)
trap 'rm -f "$defs"' EXIT
for o in "$dir"/*.o; do
	nm --defined-only "$o" | awk -v m="$(basename "$o" .o)" '$2 == "T" {print $3, m}'
done | sort >"$defs"
for o in "$dir"/*.o; do
	nm -u "$o" | awk '{print $2}' | sort | join - "$defs" |
		awk -v m="$(basename "$o" .o)" '$2 != m {print m, "->", $2}'
done | sort -u | python3 -c '
import sys, collections
edges = collections.defaultdict(set)
for line in sys.stdin:
    a, _, b = line.split()
    edges[a].add(b)
    print(line, end="")
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
'

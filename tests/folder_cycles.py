#!/usr/bin/env python3
"""Fails on an include cycle between loom's top-level folders.

A folder is a top-level folder of the library (core, graph, ops, nn, train, io, data, eval,
distributed) with its public headers under include/loom/<folder>/. An edge A -> B is an
#include "..." in a file of A that names a file of B. The folders must form a DAG, so that
each can be read, built and tested above the ones it uses. Prints the folder graph, and each
cycle with the includes that make it.

    folder_cycles.py REPO_ROOT
"""
import collections
import os
import re
import subprocess
import sys

FOLDERS = ["core", "graph", "ops", "nn", "train", "io", "data", "eval", "distributed", "onnx"]
INCLUDE = re.compile(r'\s*#\s*include\s*"([^"]+)"')


def folder_of(path):
    if path.startswith("include/loom/"):
        rest = path[len("include/loom/"):]
        return rest.split("/")[0] if "/" in rest else None  # loom.hpp, ops.hpp: the umbrellas
    return path.split("/")[0]


def main():
    root = sys.argv[1]
    files = subprocess.run(["git", "-C", root, "ls-files", "*.cpp", "*.hpp"], capture_output=True, text=True,
                           check=True).stdout.split()
    edges = collections.defaultdict(lambda: collections.defaultdict(list))
    for f in files:
        a = folder_of(f)
        if a not in FOLDERS:
            continue
        with open(os.path.join(root, f), errors="replace") as text:
            for line in text:
                m = INCLUDE.match(line)
                if not m:
                    continue
                name = m.group(1)
                target = "include/" + name if name.startswith("loom/") else os.path.normpath(
                    os.path.join(os.path.dirname(f), name))
                b = folder_of(target)
                if b in FOLDERS and b != a:
                    edges[a][b].append(f"{f} -> {name}")
    for a in FOLDERS:
        print(f"{a}: uses {', '.join(sorted(edges[a])) or 'no other folder'}")
    # a cycle exists iff some strongly connected component has two folders: find them (Tarjan)
    index, low, on, stack, comps, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            comps.append(comp)

    for v in FOLDERS:
        if v not in index:
            visit(v)
    cycles = [c for c in comps if len(c) > 1]
    for c in cycles:
        print(f"folder_cycles: a cycle between {', '.join(sorted(c))}:")
        for a in sorted(c):
            for b in sorted(edges[a]):
                if b in c:
                    for why in edges[a][b]:
                        print(f"  {why}")
    print(f"folder_cycles: {len(cycles)} cycle(s)")
    return 1 if cycles else 0


if __name__ == "__main__":
    sys.exit(main())

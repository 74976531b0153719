#!/usr/bin/env python3
"""A code block of the docs that is a whole program is kept as a file the build compiles and a
test runs; the docs show it marked by the line before the block,

    <!-- file: tests/distributed/doc_program.cpp -->

This check fails when a marked block is not, to the byte, the file it names (so the docs never
show a program that was not compiled), or names a file that does not exist.

    check_doc_files.py REPO_ROOT
"""
import pathlib
import re
import sys

MARK = re.compile(r"^<!-- file: (\S+) -->$")


def blocks(text):
    """(file named by the mark, the block's text) of every marked block."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        m = MARK.match(line)
        if not m:
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
            yield m.group(1), None
            continue
        end = next((j for j in range(i + 2, len(lines)) if lines[j] == "```"), None)
        yield m.group(1), None if end is None else "\n".join(lines[i + 2:end]) + "\n"


def main():
    root = pathlib.Path(sys.argv[1])
    problems, checked = [], 0
    for doc in sorted([root / "README.md", *(root / "docs").glob("*.md")]):
        for name, block in blocks(doc.read_text()):
            where = f"{doc.relative_to(root)}: block of {name}"
            path = root / name
            if block is None:
                problems.append(f"{where}: the mark is not followed by a closed code block")
            elif not path.is_file():
                problems.append(f"{where}: no such file")
            elif path.read_text() != block:
                problems.append(f"{where}: differs from the file (copy the file into the docs)")
            else:
                checked += 1
    for p in problems:
        print("check_doc_files:", p)
    if checked == 0 and not problems:
        problems.append("no marked block found")
        print("check_doc_files: no marked block found")
    print(f"check_doc_files: {checked} block(s) equal to their files, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

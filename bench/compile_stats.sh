#!/usr/bin/env bash
# Compile-time cost of loom's users (docs/design-notes.md; figures in bench/README.md):
#
#   1. wall time and peak compiler memory ("Maximum resident set size" of /usr/bin/time -v) of
#      translation units, compiled one at a time with their exact command from the compile
#      database. By default: every file under tests/ and examples/ that is in the database,
#      as a table sorted by time, then the largest test and the largest example;
#   2. the size of the compiler's error output for each compile-must-fail file under
#      tests/compile_fail/ (a shape error should print a few lines, not pages).
#
#   bench/compile_stats.sh [--tsv FILE] [SOURCE...]
#
#   BUILD_DIR   build directory holding compile_commands.json (default: build; configure it
#               with -DCMAKE_EXPORT_COMPILE_COMMANDS=ON, as scripts/bench does)
#   --tsv FILE  also write the results as tab-separated lines (kind, file, seconds, KiB or
#               bytes, ...) for scripts/bench's summary
#
# Object files go to a temporary directory, never into the build tree.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
build_dir="${BUILD_DIR:-build}"
[[ "$build_dir" = /* ]] || build_dir="$root/$build_dir"
db="$build_dir/compile_commands.json"

tsv=""
sources=()
while (($#)); do
  case "$1" in
    --tsv) tsv="$2"; shift 2 ;;
    -h|--help) sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) sources+=("$1"); shift ;;
  esac
done

die() { echo "compile_stats: $*" >&2; exit 1; }
[[ -f "$db" ]] || die "no $db (configure with -DCMAKE_EXPORT_COMPILE_COMMANDS=ON, or set BUILD_DIR)"
command -v python3 >/dev/null || die "needs python3 (to read the compile database)"
if [[ ! -x /usr/bin/time ]]; then
  echo "compile_stats: installing GNU time (/usr/bin/time)" >&2
  if [[ $(id -u) -eq 0 ]]; then as_root=(); else as_root=(sudo); fi
  { "${as_root[@]}" apt-get update -qq &&
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends time; } >/dev/null ||
    die "/usr/bin/time is missing and could not be installed (apt-get install time)"
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# command_for FILE [--syntax-only-from REFERENCE]: prints "directory\0arg\0arg...\0" for
# compiling FILE with its database entry, the object file redirected into $tmp. With a
# reference, FILE need not be in the database: REFERENCE's flags are used, with
# -fsyntax-only instead of an object file.
command_for() {
  python3 - "$db" "$root" "$tmp/out.o" "$@" <<'EOF'
import json, os, shlex, sys
db, root, out, file = sys.argv[1:5]
ref = sys.argv[6] if len(sys.argv) > 6 else None
want = os.path.realpath(os.path.join(root, ref or file))
for e in json.load(open(db)):
    path = os.path.realpath(os.path.join(e["directory"], e["file"]))
    if path != want:
        continue
    args = e["arguments"] if "arguments" in e else shlex.split(e["command"])
    res, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            res += ["-fsyntax-only"] if ref else ["-o", out]
            continue
        if os.path.realpath(os.path.join(e["directory"], a)) == want:
            a = os.path.realpath(os.path.join(root, file))
        res.append(a)
    sys.stdout.write("\0".join([e["directory"]] + res) + "\0")
    sys.exit(0)
sys.exit(1)
EOF
}

# measure FILE [REFERENCE]: compiles once under /usr/bin/time -v; sets rc, secs, kib,
# err_bytes, err_lines and leaves the compiler's messages in $tmp/stderr.
measure() {
  local file="$1" ref="${2:-}"
  local -a cmd
  if [[ -n "$ref" ]]; then
    mapfile -d '' cmd < <(command_for "$file" --syntax-only-from "$ref") || return 1
  else
    mapfile -d '' cmd < <(command_for "$file") || return 1
  fi
  ((${#cmd[@]} > 1)) || return 1
  set +e
  (cd "${cmd[0]}" && /usr/bin/time -v -o "$tmp/time" "${cmd[@]:1}" >"$tmp/stdout" 2>"$tmp/stderr")
  rc=$?
  set -e
  secs="$(awk -F': ' '/Elapsed \(wall clock\)/ {n = split($2, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i]; printf "%.2f", s}' "$tmp/time")"
  kib="$(awk -F': ' '/Maximum resident set size/ {print $2}' "$tmp/time")"
  err_bytes="$(wc -c <"$tmp/stderr")"
  err_lines="$(wc -l <"$tmp/stderr")"
}

# ---- 1. compile time and memory ----
if ((${#sources[@]} == 0)); then
  mapfile -t sources < <(python3 - "$db" "$root" <<'EOF'
import json, os, sys
db, root = sys.argv[1:3]
seen = set()
for e in json.load(open(db)):
    rel = os.path.relpath(os.path.realpath(os.path.join(e["directory"], e["file"])), root)
    top = rel.split(os.sep)[0]
    if top in ("tests", "examples") and not rel.startswith("tests/compile_fail/") and rel not in seen:
        seen.add(rel)
        print(rel)
EOF
)
  ((${#sources[@]})) || die "no file under tests/ or examples/ in $db"
fi

echo "== compile time and peak memory (GCC, one file at a time, $(basename "$build_dir")/compile_commands.json) =="
rows=()
for f in "${sources[@]}"; do
  rel="$(realpath --relative-to="$root" "$f" 2>/dev/null || echo "$f")"
  [[ -e "$root/$rel" ]] || rel="$f"
  if ! measure "$rel"; then
    echo "  $rel: not in the compile database, skipped" >&2
    continue
  fi
  status="ok"
  ((rc == 0)) || status="FAILED (exit $rc)"
  rows+=("$secs"$'\t'"$rel"$'\t'"$kib"$'\t'"$status")
  printf '  measured %-45s %7s s\n' "$rel" "$secs" >&2
done
((${#rows[@]})) || die "nothing measured"

printf '%-48s %9s %12s  %s\n' "file" "wall s" "peak MiB" "result"
printf '%s\n' "${rows[@]}" | sort -t$'\t' -k1,1 -gr | while IFS=$'\t' read -r s f k st; do
  printf '%-48s %9.2f %12.0f  %s\n' "$f" "$s" "$((k / 1024))" "$st"
done
for kind in tests examples; do
  top="$(printf '%s\n' "${rows[@]}" | awk -F'\t' -v k="$kind/" 'index($2, k) == 1' | sort -t$'\t' -k1,1 -gr | head -1)"
  [[ -n "$top" ]] || continue
  IFS=$'\t' read -r s f k st <<<"$top"
  printf 'largest %-8s %s: %.2f s, %d MiB\n' "${kind%s}:" "$f" "$s" "$((k / 1024))"
done
if [[ -n "$tsv" ]]; then
  : >"$tsv"
  for r in "${rows[@]}"; do
    IFS=$'\t' read -r s f k st <<<"$r"
    printf 'compile\t%s\t%s\t%s\t%s\n' "$f" "$s" "$k" "$st" >>"$tsv"
  done
fi

# ---- 2. size of the errors of compile-must-fail files ----
echo
echo "== error output of tests/compile_fail/ (each must fail; budget: its '// max-bytes:' line) =="
mapfile -t fails < <(cd "$root" && find tests/compile_fail -maxdepth 2 -type f \( -name '*.cpp' -o -name '*.cc' \) 2>/dev/null | sort)
if ((${#fails[@]} == 0)); then
  echo "(no compile-must-fail files under tests/compile_fail/ yet)"
  exit 0
fi
# The flags of a test (include dirs, -std, defines), else of an example, else of anything.
reference="$(printf '%s\n' "${sources[@]}" | grep -m1 '^tests/' || printf '%s\n' "${sources[@]}" | head -1)"
printf '%-50s %8s %8s %6s %7s  %s\n' "file" "bytes" "budget" "lines" "wall s" "first error"
for f in "${fails[@]}"; do
  # its own database entry (tests/compile_fail/CMakeLists.txt makes one), else a test's flags
  if ! measure "$f" && ! measure "$f" "$reference"; then
    echo "$f: cannot build a command (reference $reference)" >&2
    continue
  fi
  budget="$(sed -n '2s|^// max-bytes: *\([0-9]*\).*|\1|p' "$root/$f")"
  first="$(grep -m1 -E ' error: ' "$tmp/stderr" | sed -E 's/^.* error: (static assertion failed: )?//' | cut -c1-64 || true)"
  ((rc != 0)) || first="UNEXPECTEDLY COMPILED"
  printf '%-50s %8d %8s %6d %7.2f  %s\n' "$f" "$err_bytes" "${budget:--}" "$err_lines" "$secs" "$first"
  [[ -z "$tsv" ]] || printf 'error\t%s\t%s\t%s\t%s\t%s\n' "$f" "$secs" "$err_bytes" "$err_lines" "$first" >>"$tsv"
done

#!/usr/bin/env bash
# Side-by-side figures for an older commit and the working tree.
#
#   benches/compare.sh OLD_COMMIT [ROUNDS] [--all]
#
# Without --all: the tracker's paired per-socket figures and the analysis time (below).
# With --all, also every criterion bench (decode, dump, exact, tracker, each function's
# median time, run in turn ROUNDS times with short measurement times) and the two
# release-binary benchmarks, whose figures are the monitor's own CPU: tiers (10,000 idle
# and 100 busy connections; one round of 8 s per configuration) and, as root, netns (ten
# namespaces against one); each runs OLD_COMMIT's release binary beside this tree's
# (OLD=…). Prints one table per part: minimum and median per build, and new/old.
#
# The machine this project runs on is shared, and its speed swings between runs by up to
# 2x. So figures are only compared when taken in one session, alternating the two builds:
# this builds the tracker bench in a temporary worktree of OLD_COMMIT and in this tree, then
# runs them in turn ROUNDS times (default 8), each going first in every other round. Each run
# prints the paired per-socket figures (their medians, then their means) and the best-of-300
# analysis time. Only the part outside criterion runs: the filter `none-` matches no
# criterion bench. Prints the minimum and median of each figure per build.
#
# Both builds run this tree's bench source when it compiles against OLD_COMMIT's library (it
# uses only the public tracker and analyzer API), so that both measure the same things;
# otherwise OLD_COMMIT's own bench runs, and figures it does not print show as "-".
set -euo pipefail
old=${1:?usage: benches/compare.sh OLD_COMMIT [ROUNDS] [--all]}
rounds=${2:-8}
all=${3:-}
here=$(git rev-parse --show-toplevel)
wt=$(mktemp -d /tmp/cgmon-compare.XXXXXX)
trap 'git -C "$here" worktree remove --force "$wt" >/dev/null 2>&1 || true' EXIT
git -C "$here" worktree add --detach "$wt" "$old" >/dev/null
# OLD_COMMIT builds into a target directory of its own that outlives the worktree, so a
# second comparison against it does not rebuild everything.
old_target=/tmp/cgmon-compare-target-$(git -C "$here" rev-parse --short "$old")
# (A build that fails prints no path: `|| true` keeps pipefail from ending the script.)
bench_bin() { (cd "$1" && CARGO_TARGET_DIR=${2:-$1/target} cargo bench --bench tracker \
    --no-run 2>&1 || true) | sed -n 's/.*Executable benches\/tracker.rs (\(.*\))/\1/p' | tail -1; }
cp "$here/benches/tracker.rs" "$wt/benches/tracker.rs"
cp -r "$here/benches/common" "$wt/benches/" # the fixture module the bench includes
old_bin=$(bench_bin "$wt" "$old_target")
if [ -z "$old_bin" ]; then
    echo "this tree's bench does not build against $old: running $old's own" >&2
    git -C "$wt" checkout -- benches/tracker.rs
    old_bin=$(bench_bin "$wt" "$old_target")
fi
new_bin="$here/$(bench_bin "$here")"
out=$(mktemp)
# ONLY_ALL=1 (with --all): skip the tracker's paired figures.
[ -n "${ONLY_ALL:-}" ] && rounds_paired=0 || rounds_paired=$rounds
# The build run second in a round came out 10-20 ns per socket slower, whichever it was
# (benches/RESULTS.md, seventh session): alternate which goes first.
for r in $(seq "$rounds_paired"); do
    order="old new"; [ $((r % 2)) = 0 ] && order="new old"
    for b in $order; do
        bin=old_bin; [ "$b" = new ] && bin=new_bin
        dir=$wt; [ "$b" = new ] && dir=$here
        # Run from the crate's directory: the bench reads its fixture relative to it.
        (cd "$dir" && "${!bin}" --bench none- 2>&1) |
            grep -E "tracker per socket|analyze 10k samples|analyze one-sample" | sed "s/^/$b /" >> "$out"
    done
done
python3 - "$out" <<'PY'
import collections, re, statistics, sys
pats = {
    "steady ns": r"steady ([0-9.]+) ns",
    "changed ns": r"every sample changed ([0-9.]+) ns",
    "changed, hour ns": r"/ ([0-9.]+) ns \(hour windows\)",
    "10th changed ns": r"every 10th sample changed ([0-9.]+) ns",
    "floor ns": r"memory traffic alone ([0-9.]+) ns",
    "analysis ms": r"best of 300 runs ([0-9.]+)(ms|µs)",
    "one-sample record µs": r"best of 3000 runs ([0-9.]+)(ns|µs)",
}
vals = collections.defaultdict(list)
for line in open(sys.argv[1]):
    build = line.split()[0]
    # The bench prints the paired figures twice: medians, then means.
    tag = ", mean" if "x60, mean" in line else ""
    for name, pat in pats.items():
        m = re.search(pat, line)
        if m:
            x = float(m.group(1))
            if name == "analysis ms" and m.group(2) == "µs":
                x /= 1000
            if name == "one-sample record µs" and m.group(2) == "ns":
                x /= 1000
            vals[(name + tag, build)].append(x)
names = []
for name, _ in vals:
    if name not in names:
        names.append(name)
for name in names:
    row = [f"{name:>22}"]
    for build in ("old", "new"):
        v = vals.get((name, build))
        row.append(f"{build}: min {min(v):8.3f} median {statistics.median(v):8.3f}" if v else f"{build}: -")
    print("  ".join(row))
PY
rm -f "$out"
[ "$all" = --all ] || exit 0

# Every criterion bench: OLD_COMMIT's own source against its library, this tree's against
# this tree's (a bench's ids are its names; an id only one side has shows "-").
crit_bin() { (cd "$1" && CARGO_TARGET_DIR=${3:-$1/target} cargo bench --bench "$2" \
    --no-run 2>&1 || true) | sed -n "s/.*Executable benches\/$2.rs (\(.*\))/\1/p" | tail -1; }
out=$(mktemp)
for bench in decode dump exact tracker; do
    git -C "$wt" checkout -q -- benches
    ob=$(crit_bin "$wt" "$bench" "$old_target"); nb="$here/$(crit_bin "$here" "$bench")"
    for r in $(seq "$rounds"); do
        order="old new"; [ $((r % 2)) = 0 ] && order="new old"
        for b in $order; do
            bin=$ob; dir=$wt; [ "$b" = new ] && bin=$nb && dir=$here
            # (An old bench that fails its own checks must not end the comparison.)
            (cd "$dir" && "$bin" --bench --warm-up-time 1 --measurement-time 3 --noplot 2>&1 || true) |
                python3 -c '
import re, sys
text = sys.stdin.read()
unit = {"ps": 1e-3, "ns": 1.0, "µs": 1e3, "us": 1e3, "ms": 1e6, "s": 1e9}
for m in re.finditer(r"^(\S[^\n]*?)\s*(?:\n\s*)?time:\s+\[\S+ \S+ ([0-9.]+) (\S+) ", text, re.M):
    print(sys.argv[1], sys.argv[2] + "/" + m.group(1).strip(), float(m.group(2)) * unit[m.group(3)])
' "$b" "$bench" >> "$out"
        done
    done
done
echo
echo "criterion benches: median time per iteration, ns (min and median over $rounds rounds)"
python3 - "$out" <<'PY'
import collections, statistics, sys
vals = collections.defaultdict(list)
for line in open(sys.argv[1]):
    build, rest = line.split(" ", 1)
    name, x = rest.rsplit(" ", 1)
    vals[(name, build)].append(float(x))
names = sorted({n for n, _ in vals})
print(f"| bench | old min | old median | new min | new median | new/old (median) |")
print("|---|---|---|---|---|---|")
for n in names:
    o, w = vals.get((n, "old")), vals.get((n, "new"))
    f = lambda v, g: f"{g(v):.1f}" if v else "-"
    ratio = f"{statistics.median(w) / statistics.median(o):.3f}" if o and w else "-"
    print(f"| {n} | {f(o, min)} | {f(o, statistics.median)} | {f(w, min)} | {f(w, statistics.median)} | {ratio} |")
PY
rm -f "$out"

# The release-binary benchmarks: this tree's harness runs both binaries (NO_BINARIES=1: not).
[ -n "${NO_BINARIES:-}" ] && exit 0
(cd "$wt" && CARGO_TARGET_DIR=$old_target cargo build --release --quiet)
old_exe=$old_target/release/cgmon-rs
echo
echo "tiers (monitor CPU % of a core; OLD=$old):"
(cd "$here" && OLD=$old_exe cargo bench --quiet --bench tiers -- 1 8 2>/dev/null) |
    grep -E "^(config|[0-9]+ms|bare)"
if [ "$(id -u)" = 0 ]; then
    echo
    echo "netns (CPU ms per tick; OLD=$old):"
    (cd "$here" && OLD=$old_exe cargo bench --quiet --bench netns -- 1 6 2>/dev/null) |
        grep -E "\|"
else
    echo "netns: needs root (namespaces); not run"
fi

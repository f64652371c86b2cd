#!/usr/bin/env bash
# Side-by-side tracker and analysis figures for an older commit and the working tree.
#
#   benches/compare.sh OLD_COMMIT [ROUNDS]
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
old=${1:?usage: benches/compare.sh OLD_COMMIT [ROUNDS]}
rounds=${2:-8}
here=$(git rev-parse --show-toplevel)
wt=$(mktemp -d /tmp/cgmon-compare.XXXXXX)
trap 'git -C "$here" worktree remove --force "$wt" >/dev/null 2>&1 || true' EXIT
git -C "$here" worktree add --detach "$wt" "$old" >/dev/null
# OLD_COMMIT builds into a target directory of its own that outlives the worktree, so a
# second comparison against it does not rebuild everything.
old_target=/tmp/cgmon-compare-target-$(git -C "$here" rev-parse --short "$old")
bench_bin() { (cd "$1" && CARGO_TARGET_DIR=${2:-$1/target} cargo bench --bench tracker \
    --no-run 2>&1) | sed -n 's/.*Executable benches\/tracker.rs (\(.*\))/\1/p' | tail -1; }
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
# The build run second in a round came out 10-20 ns per socket slower, whichever it was
# (benches/RESULTS.md, seventh session): alternate which goes first.
for r in $(seq "$rounds"); do
    order="old new"; [ $((r % 2)) = 0 ] && order="new old"
    for b in $order; do
        bin=old_bin; [ "$b" = new ] && bin=new_bin
        dir=$wt; [ "$b" = new ] && dir=$here
        # Run from the crate's directory: the bench reads its fixture relative to it.
        (cd "$dir" && "${!bin}" --bench none- 2>&1) |
            grep -E "tracker per socket|analyze 10k samples" | sed "s/^/$b /" >> "$out"
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

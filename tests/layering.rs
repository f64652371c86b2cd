//! The layout stays one-way: no import circle between the files of `src/` (test modules
//! included), and no module imports one on a later stage of the pipeline. It reads the
//! source as text: every `crate::…` and `super::…` path, resolved to the file it names. And
//! the production code stays readable: no file over 700 lines, no function over 80.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each top-level module's place: a module may import only modules of its own rank or
/// lower. The pipeline runs up the ranks: sampler, tracker, poll, analyzer, writer; the
/// charts (presentation) stand above every stage that makes data, so a core module that
/// draws fails here; the record types and the channels' edges lie below the stages that
/// use them.
const RANKS: &[(&str, u32)] = &[
    ("wire", 0),
    ("states", 0),
    ("units", 0),
    ("locks", 0),
    ("clock", 0),
    ("budget", 0),
    ("stats", 0),
    ("gzip", 0),
    ("metrics", 0),
    ("testkit", 1),
    ("filter", 1),
    ("record", 1),
    ("lab", 1),
    ("netns", 1),
    ("sampler", 2),
    ("who", 2),
    ("edges", 3),
    ("tracker", 4),
    ("poll", 5),
    ("chart", 6),
    ("analysis", 6),
    ("writer", 7),
    // The writer's consumers: above it, so that the writer can import none of them.
    ("recent", 8),
    ("samples_out", 8),
    ("sink", 8),
    ("ipfix", 8),
    ("http", 9),
    ("cli", 10),
    ("logging", 10),
    ("report", 10),
    ("app", 11),
    ("diagnose", 12),
    ("lib", 13),
    ("main", 13),
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module path of a file: `src/tracker/views.rs` → [tracker, views]; `mod.rs` names its
/// folder.
fn module_of(root: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(root).unwrap().with_extension("");
    let mut v: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
    if v.last().is_some_and(|l| l == "mod") {
        v.pop();
    }
    v
}

/// The file that defines the longest prefix of `path` (a module path), if any.
fn file_of(path: &[String], by_module: &BTreeMap<Vec<String>, PathBuf>) -> Option<PathBuf> {
    (1..=path.len()).rev().find_map(|n| by_module.get(&path[..n]).cloned())
}

/// The paths a `use` tree at the start of `s` names: `a::b::{c, d::e}` gives `a::b::c` and
/// `a::b::d::e`. A path ends at the first segment followed by anything but `::`.
fn paths(s: &str) -> Vec<Vec<String>> {
    let mut prefix = Vec::new();
    let mut rest = s;
    loop {
        if let Some(inner) = rest.strip_prefix('{') {
            // Split the group at its top-level commas.
            let (mut depth, mut start, mut out) = (0, 0, Vec::new());
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        out.push(&inner[start..i]);
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.push(&inner[start..i]);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            return out
                .into_iter()
                .flat_map(|item| paths(item.trim()))
                .map(|tail| prefix.iter().cloned().chain(tail).collect())
                .collect();
        }
        let w: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if w.is_empty() {
            return if prefix.is_empty() { Vec::new() } else { vec![prefix] };
        }
        rest = &rest[w.len()..];
        prefix.push(w);
        match rest.strip_prefix("::") {
            Some(r) => rest = r,
            None => return vec![prefix],
        }
    }
}

/// Every module path a file's text names through `crate::` or `super::`.
fn imports(me: &[String], text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (i, _) in text.match_indices("crate::") {
        if text[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue; // e.g. `cgmon_rs::` is not ours to resolve here
        }
        out.extend(paths(&text[i + "crate::".len()..]));
    }
    // `super::` (possibly repeated) relative to this file's module; a `mod.rs` or a file
    // with a folder of submodules is its own parent's child like any other.
    for (i, _) in text.match_indices("super::") {
        if text[..i].ends_with("super::") || text[..i].ends_with(|c: char| c.is_alphanumeric()) {
            continue;
        }
        let mut rest = &text[i..];
        let mut base = me.to_vec();
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        for tail in paths(rest) {
            let mut p = base.clone();
            p.extend(tail);
            out.push(p);
        }
    }
    out
}

/// Every production file under `root` and the files its production lines import (a
/// module's own submodules left out).
fn production_edges(root: &Path) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let mut all = Vec::new();
    files(root, &mut all);
    let module = |f: &Path| module_of(root, f);
    let by_module: BTreeMap<Vec<String>, PathBuf> =
        all.iter().map(|f| (module(f), f.clone())).collect();
    let mut edges: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for f in &all {
        let Some(lines) = production_lines(f) else { continue };
        if f.file_name().is_some_and(|n| n == "testing.rs") {
            continue; // test helpers, compiled only for tests
        }
        let text = lines.join("\n");
        let out = edges.entry(f.clone()).or_default();
        for p in imports(&module(f), &text) {
            let Some(to) = file_of(&p, &by_module) else { continue };
            if to != *f && !module(&to).starts_with(&module(f)) {
                out.insert(to);
            }
        }
    }
    edges
}

/// The top-level modules under `root` and the arrows between them: `a → b` when a
/// production file of `a` imports a file of `b` (tests may reach down further).
fn module_edges(root: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let top = |f: &Path| module_of(root, f).first().cloned().unwrap_or_default();
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let production = production_edges(root);
    for (f, tos) in production {
        let from = top(&f);
        let set = out.entry(from.clone()).or_default();
        set.extend(tos.iter().map(|t| top(t)).filter(|t| *t != from));
    }
    out
}

/// Pairs of top-level modules that reach each other (a circle between rooms), and the
/// longest chain of arrows, as the modules along it.
fn module_circles_and_longest(
    edges: &BTreeMap<String, BTreeSet<String>>,
) -> (Vec<(String, String)>, Vec<String>) {
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_string()];
        while let Some(m) = stack.pop() {
            for n in edges.get(&m).into_iter().flatten() {
                if seen.insert(n.clone()) {
                    stack.push(n.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&String, BTreeSet<String>> =
        edges.keys().map(|m| (m, reach(m))).collect();
    let mut circles = Vec::new();
    for (a, ra) in &reached {
        for b in ra {
            if *a < b && reached.get(b).is_some_and(|rb| rb.contains(*a)) {
                circles.push(((*a).clone(), b.clone()));
            }
        }
    }
    // Longest path by memo; a module inside a circle ends its chain there.
    fn longest(
        m: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        memo: &mut BTreeMap<String, Vec<String>>,
        on: &mut BTreeSet<String>,
    ) -> Vec<String> {
        if let Some(v) = memo.get(m) {
            return v.clone();
        }
        on.insert(m.to_string());
        let mut best = Vec::new();
        for n in edges.get(m).into_iter().flatten() {
            if on.contains(n) {
                continue;
            }
            let c = longest(n, edges, memo, on);
            if c.len() > best.len() {
                best = c;
            }
        }
        on.remove(m);
        let mut v = vec![m.to_string()];
        v.extend(best);
        memo.insert(m.to_string(), v.clone());
        v
    }
    let mut memo = BTreeMap::new();
    let mut best = Vec::new();
    for m in edges.keys() {
        let c = longest(m, edges, &mut memo, &mut BTreeSet::new());
        if c.len() > best.len() {
            best = c;
        }
    }
    (circles, best)
}

/// What is wrong with the layout under `root` (a `src/` folder): imports up the ranks, and
/// import circles.
fn problems(root: &Path) -> Vec<String> {
    let mut all = Vec::new();
    files(root, &mut all);
    let module = |f: &Path| module_of(root, f);
    let by_module: BTreeMap<Vec<String>, PathBuf> =
        all.iter().map(|f| (module(f), f.clone())).collect();
    let mut edges: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    let rank = |f: &Path| -> u32 {
        let top = module(f).first().cloned().unwrap_or_default();
        RANKS
            .iter()
            .find(|(m, _)| *m == top)
            .unwrap_or_else(|| panic!("module {top} has no rank in tests/layering.rs"))
            .1
    };
    let mut out = Vec::new();
    for f in &all {
        let text = std::fs::read_to_string(f).unwrap();
        for p in imports(&module(f), &text) {
            let Some(to) = file_of(&p, &by_module) else { continue };
            // A module's own file and its submodules' files are one module: a file that
            // declares `mod x;` or names `self` reaches down, which is no import.
            if to == *f || module(&to).starts_with(&module(f)) {
                continue;
            }
            if rank(&to) > rank(f) {
                out.push(format!(
                    "import up: {} -> {} ({})",
                    f.display(),
                    to.display(),
                    p.join("::")
                ));
            }
            edges.entry(f.clone()).or_default().insert(to);
        }
    }
    // A circle: a path from a file back to itself.
    for start in edges.keys() {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<(PathBuf, Vec<PathBuf>)> = vec![(start.clone(), vec![start.clone()])];
        while let Some((at, path)) = stack.pop() {
            for next in edges.get(&at).into_iter().flatten() {
                if next == start {
                    let names: Vec<String> = path.iter().map(|p| p.display().to_string()).collect();
                    out.push(format!("circle: {} -> {}", names.join(" -> "), start.display()));
                    stack.clear();
                    break;
                }
                if seen.insert(next.clone()) {
                    let mut p = path.clone();
                    p.push(next.clone());
                    stack.push((next.clone(), p));
                }
            }
        }
    }
    out
}

#[test]
fn no_import_circle_and_no_import_up_the_pipeline() {
    let p = problems(&src());
    assert!(p.is_empty(), "{}", p.join("\n"));
}

/// The most modules one chain of imports may pass through, top-level module to module
/// (`main`, which imports the library as a crate, not counted): every module more is one
/// more a newcomer must hold in mind to follow a change.
const LONGEST_CHAIN: usize = 11;

#[test]
fn no_two_top_level_modules_import_each_other_and_the_longest_chain_is_short() {
    let edges = module_edges(&src());
    let (circles, longest) = module_circles_and_longest(&edges);
    let arrows: usize = edges.values().map(BTreeSet::len).sum();
    println!("{} top-level modules, {arrows} arrows", edges.len());
    println!("longest chain ({} modules): {}", longest.len(), longest.join(" -> "));
    assert!(circles.is_empty(), "top-level modules that import each other: {circles:?}");
    assert!(
        longest.len() <= LONGEST_CHAIN,
        "the longest import chain passes {} modules (at most {LONGEST_CHAIN}): {}",
        longest.len(),
        longest.join(" -> ")
    );
}

/// A made-up `src/` of `files` (path, text) in a fresh temporary folder.
fn made_up_tree(name: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cgmon-{name}-{}", std::process::id()));
    for (rel, text) in files {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    dir
}

#[test]
fn the_module_check_finds_a_circle_between_rooms_and_the_longest_chain() {
    // Files that do not import each other, in modules that do: a circle between rooms.
    let dir = made_up_tree(
        "rooms",
        &[
            ("sink/mod.rs", "mod a;\n"),
            ("sink/a.rs", "use crate::writer::b::Gzip;\n"),
            ("writer/mod.rs", "mod b; mod c;\n"),
            ("writer/b.rs", "pub struct Gzip;\n"),
            ("writer/c.rs", "use crate::sink::Msg; use crate::wire::x;\n"),
            ("wire.rs", "pub fn x() {}\n"),
        ],
    );
    let edges = module_edges(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    let (circles, longest) = module_circles_and_longest(&edges);
    assert_eq!(circles, [("sink".to_string(), "writer".to_string())]);
    assert_eq!(longest.len(), 3, "{longest:?}");
    assert_eq!(longest.last().map(String::as_str), Some("wire"));
}

#[test]
fn the_check_finds_a_circle_and_an_import_up_the_pipeline() {
    // A made-up tree: the writer imports the tracker (fine: downstream takes from upstream),
    // the tracker imports the analyzer (up the pipeline), and two filter files import each
    // other (a circle).
    let dir = made_up_tree(
        "layering",
        &[
            ("writer.rs", "use crate::tracker::Flow;\n"),
            ("tracker.rs", "use crate::analysis::FlowStats;\n"),
            ("analysis.rs", "pub struct FlowStats;\n"),
            ("filter/mod.rs", "mod audit; mod compile;\n"),
            ("filter/audit.rs", "use super::compile::op;\n"),
            ("filter/compile.rs", "use super::{Expr, audit};\n"),
        ],
    );
    let p = problems(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(p.iter().any(|l| l.starts_with("import up:") && l.contains("tracker.rs")), "{p:?}");
    assert!(!p.iter().any(|l| l.contains("writer.rs")), "{p:?}");
    assert!(p.iter().any(|l| l.starts_with("circle:") && l.contains("audit.rs")), "{p:?}");
    assert_eq!(
        imports(
            &["filter".to_string(), "audit".into()],
            "use super::compile::op; use crate::wire::sock::SockKey;"
        ),
        vec![
            vec!["wire".to_string(), "sock".into(), "SockKey".into()],
            vec!["filter".to_string(), "compile".into(), "op".into()],
        ]
    );
    assert_eq!(paths("a::{b, c::{d, e}};").len(), 3);
}

/// The production code's own lines: a file up to an inline `#[cfg(test)] mod tests {`.
/// Test files (`tests.rs`, `*_tests.rs`), the testkit and the test stand-ins (`fakes/`)
/// are not production code.
fn production_lines(f: &Path) -> Option<Vec<String>> {
    let name = f.file_name()?.to_str()?;
    let in_fakes = f.components().any(|c| c.as_os_str() == "fakes");
    if name == "tests.rs" || name.ends_with("_tests.rs") || name == "testkit.rs" || in_fakes {
        return None;
    }
    let text = std::fs::read_to_string(f).ok()?;
    let lines: Vec<String> = text.lines().map(String::from).collect();
    let end = (0..lines.len())
        .find(|&i| {
            lines[i].starts_with("#[cfg(test)]")
                && lines.get(i + 1).is_some_and(|l| l.starts_with("mod tests {"))
        })
        .unwrap_or(lines.len());
    Some(lines[..end].to_vec())
}

/// `line`'s function name when it starts a function item (`pub`, `pub(…)`, `async`,
/// `const`, `unsafe` before `fn`), with its indentation.
fn fn_start(line: &str) -> Option<(usize, String)> {
    let indent = line.len() - line.trim_start().len();
    let mut rest = line.trim_start();
    if let Some(r) = rest.strip_prefix("pub") {
        rest = r.trim_start();
        if rest.starts_with('(') {
            rest = rest[rest.find(')')? + 1..].trim_start();
        }
    }
    for word in ["async ", "const ", "unsafe "] {
        rest = rest.strip_prefix(word).unwrap_or(rest);
    }
    let name: String = rest
        .strip_prefix("fn ")?
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some((indent, name))
}

/// Lengths in lines, each with what it measures.
type Lengths = Vec<(usize, String)>;

/// Every production file and function, with its length in lines.
fn lengths() -> (Lengths, Lengths) {
    let mut all = Vec::new();
    files(&src(), &mut all);
    let (mut files_, mut fns) = (Vec::new(), Vec::new());
    for f in all {
        let Some(lines) = production_lines(&f) else { continue };
        let shown = f.strip_prefix(src()).unwrap_or(&f).display().to_string();
        files_.push((lines.len(), shown.clone()));
        for (i, line) in lines.iter().enumerate() {
            let Some((indent, name)) = fn_start(line) else { continue };
            if line.trim_end().ends_with(';') {
                continue; // a declaration without a body
            }
            let close = format!("{}}}", " ".repeat(indent));
            if let Some(j) = (i..lines.len()).find(|&j| lines[j] == close) {
                fns.push((j - i + 1, format!("{shown}:{} {name}", i + 1)));
            }
        }
    }
    (files_, fns)
}

/// Past these a newcomer loses the thread (issue 53): no production file over 700 lines,
/// no production function over 80, and `app::run` reads as the wiring, under 60.
#[test]
fn production_files_and_functions_stay_short() {
    let (files_, fns) = lengths();
    assert!(fns.len() > 500, "only {} functions found: is the scan reading them?", fns.len());
    let long_files: Vec<_> = files_.iter().filter(|(n, _)| *n > 700).collect();
    assert!(long_files.is_empty(), "files over 700 lines: {long_files:?}");
    let long_fns: Vec<_> = fns.iter().filter(|(n, _)| *n > 80).collect();
    assert!(long_fns.is_empty(), "functions over 80 lines: {long_fns:?}");
    let run = fns.iter().find(|(_, w)| w.starts_with("app.rs:") && w.ends_with(" run"));
    let run = run.unwrap_or_else(|| panic!("no app::run found"));
    assert!(run.0 < 60, "app::run is {} lines: it should read as the wiring", run.0);
}

#[test]
fn the_length_scan_finds_functions_and_their_ends() {
    assert_eq!(fn_start("    pub(super) async fn run<S: X>("), Some((4, "run".into())));
    assert_eq!(fn_start("pub const fn f() -> u8 {"), Some((0, "f".into())));
    assert_eq!(fn_start("    let f = |x| x;"), None);
    assert_eq!(fn_start("// fn not_code()"), None);
}

/// The top-level modules of `src/` (files and folders), but the crate's roots.
fn top_level_modules() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for e in std::fs::read_dir(src()).unwrap().flatten() {
        let p = e.path();
        let name = p.file_stem().unwrap().to_string_lossy().into_owned();
        if (p.is_dir() || p.extension().is_some_and(|x| x == "rs"))
            && name != "lib"
            && name != "main"
        {
            out.insert(name);
        }
    }
    out
}

/// Whether `text` names module `m` in code quotes: `m`, `m/`, `m.rs` or `m::…`.
fn names_module(text: &str, m: &str) -> bool {
    ["`", "/", ".rs`", "::"].iter().any(|after| text.contains(&format!("`{m}{after}")))
}

#[test]
fn every_top_level_module_is_on_both_maps() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let lib_doc: String =
        lib.lines().filter(|l| l.starts_with("//!")).collect::<Vec<_>>().join("\n");
    let internals = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/internals.md");
    let internals = std::fs::read_to_string(internals).unwrap();
    let modules = top_level_modules();
    assert!(modules.len() > 25, "only {modules:?}: is the scan reading src/?");
    let missing = |text: &str| -> Vec<&String> {
        modules.iter().filter(|m| !names_module(text, m)).collect()
    };
    assert!(missing(&lib_doc).is_empty(), "not in src/lib.rs's map: {:?}", missing(&lib_doc));
    assert!(
        missing(&internals).is_empty(),
        "not in docs/internals.md's room list: {:?}",
        missing(&internals)
    );
    assert!(names_module("`who::namer`", "who") && !names_module("`whom`", "who"));
}

/// Whether `text` defines `symbol`: an item (`fn`, `struct`, `enum`, `const`, `static`,
/// `type`, `trait`, `mod`) or a field of that name.
fn defines(text: &str, symbol: &str) -> bool {
    let item =
        ["fn", "struct", "enum", "const", "static", "type", "trait", "mod"].iter().any(|kind| {
            text.contains(&format!("{kind} {symbol}")) && {
                text.match_indices(&format!("{kind} {symbol}")).any(|(i, m)| {
                    let after = text[i + m.len()..].chars().next();
                    after.is_none_or(|c| !c.is_alphanumeric() && c != '_')
                })
            }
        });
    let field = text.lines().any(|l| {
        let l = l.trim_start();
        let l = l.strip_prefix("pub ").or_else(|| l.strip_prefix("pub(crate) ")).unwrap_or(l);
        l.starts_with(&format!("{symbol}:"))
    });
    item || field
}

#[test]
fn every_design_row_of_the_results_cites_a_file_that_holds_its_symbol() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let results = std::fs::read_to_string(root.join("benches/RESULTS.md")).unwrap();
    let mut rows = 0;
    let mut wrong = Vec::new();
    for line in results.lines().filter(|l| l.starts_with("| D")) {
        let cells: Vec<&str> = line.split('|').collect();
        let (id, place) = (cells[1].trim(), cells[2]);
        let quoted: Vec<&str> = place.split('`').skip(1).step_by(2).collect();
        rows += 1;
        let Some((path, symbols)) = quoted.split_first() else {
            wrong.push(format!("{id}: names no file"));
            continue;
        };
        let p = src().join(path);
        let text = if p.is_dir() {
            let mut all = Vec::new();
            files(&p, &mut all);
            all.iter().map(|f| std::fs::read_to_string(f).unwrap()).collect::<String>()
        } else if p.is_file() {
            std::fs::read_to_string(&p).unwrap()
        } else {
            wrong.push(format!("{id}: src/{path} does not exist"));
            continue;
        };
        for s in symbols {
            if !defines(&text, s) {
                wrong.push(format!("{id}: src/{path} defines no `{s}`"));
            }
        }
    }
    assert!(rows >= 30, "only {rows} D-rows read");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(defines("pub(super) fn emit(&mut self)", "emit") && !defines("fn emitted()", "emit"));
    assert!(defines("    pub read_for_walk: Option<u8>,", "read_for_walk"));
}

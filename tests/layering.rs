//! The layout stays one-way: no import circle between the files of `src/` (test modules
//! included), and no module imports one on a later stage of the pipeline. It reads the
//! source as text: every `crate::…` and `super::…` path, resolved to the file it names.

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
    ("who", 0),
    ("metrics", 0),
    ("testkit", 1),
    ("filter", 1),
    ("record", 1),
    ("lab", 1),
    ("netns", 1),
    ("sampler", 2),
    ("edges", 3),
    ("tracker", 4),
    ("poll", 5),
    ("chart", 6),
    ("recent", 6),
    ("analysis", 6),
    ("writer", 7),
    ("sink", 7),
    ("http", 8),
    ("cli", 9),
    ("logging", 9),
    ("report", 9),
    ("app", 10),
    ("diagnose", 11),
    ("lib", 12),
    ("main", 12),
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

#[test]
fn the_check_finds_a_circle_and_an_import_up_the_pipeline() {
    // A made-up tree: the writer imports the tracker (fine: downstream takes from upstream),
    // the tracker imports the analyzer (up the pipeline), and two filter files import each
    // other (a circle).
    let dir = std::env::temp_dir().join(format!("cgmon-layering-{}", std::process::id()));
    let w = |rel: &str, text: &str| {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    w("writer.rs", "use crate::tracker::Flow;\n");
    w("tracker.rs", "use crate::analysis::FlowStats;\n");
    w("analysis.rs", "pub struct FlowStats;\n");
    w("filter/mod.rs", "mod audit; mod compile;\n");
    w("filter/audit.rs", "use super::compile::op;\n");
    w("filter/compile.rs", "use super::{Expr, audit};\n");
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

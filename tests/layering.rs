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
    ("ipfix", 7),
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

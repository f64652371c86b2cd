//! The README and `docs/` as a newcomer reads them: every relative link and anchor leads
//! somewhere, the README stays short, `docs/flags.md` is the `--help` the binary prints,
//! and every `cgmon-rs` command line the README shows runs.

use std::path::PathBuf;
use std::process::Command;

use crate::program::BIN;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every `docs/*.md`.
fn documents() -> Vec<PathBuf> {
    let mut v = vec![root().join("README.md")];
    for e in std::fs::read_dir(root().join("docs")).unwrap().flatten() {
        if e.path().extension().is_some_and(|x| x == "md") {
            v.push(e.path());
        }
    }
    v.sort();
    v
}

/// The text outside fenced code blocks.
fn prose(text: &str) -> String {
    let mut fence = false;
    let mut out = String::new();
    for l in text.lines() {
        if l.trim_start().starts_with("```") {
            fence = !fence;
            continue;
        }
        if !fence {
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

/// The anchor GitHub makes of a heading: lower case, spaces to hyphens, and only letters,
/// digits, hyphens and underscores kept.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> Vec<String> {
    prose(text)
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|h| slug(h.trim_start_matches('#')))
        .collect()
}

/// The targets of `[text](target)` links in `text`'s prose.
fn links(text: &str) -> Vec<String> {
    let p = prose(text);
    let mut out = Vec::new();
    let mut rest = p.as_str();
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        if let Some(end) = rest.find(')') {
            out.push(rest[..end].to_string());
        }
    }
    out
}

#[test]
fn every_relative_link_and_anchor_in_the_readme_and_docs_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for target in links(&text) {
            if target.starts_with("http://") || target.starts_with("https://") {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let file = if path.is_empty() { doc.clone() } else { doc.parent().unwrap().join(path) };
            checked += 1;
            if !file.exists() {
                broken.push(format!("{}: {target} (no such file)", doc.display()));
                continue;
            }
            if !anchor.is_empty() {
                let t = std::fs::read_to_string(&file).unwrap_or_default();
                if !anchors(&t).iter().any(|a| a == anchor) {
                    broken.push(format!("{}: {target} (no such heading)", doc.display()));
                }
            }
        }
    }
    assert!(checked > 30, "only {checked} links: is the parser reading them?");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_link_checker_sees_a_broken_anchor_and_a_missing_file() {
    let text = "# Top\n\n## Who talks to whom: destinations\n\n[a](#who-talks-to-whom-destinations) \
                [b](#nowhere) [c](missing.md)\n```\n[d](#in-code)\n```\n";
    assert_eq!(links(text), ["#who-talks-to-whom-destinations", "#nowhere", "missing.md"]);
    assert!(anchors(text).contains(&"who-talks-to-whom-destinations".to_string()));
    assert!(!anchors(text).contains(&"nowhere".to_string()));
}

#[test]
fn the_readme_is_short_and_links_every_guide() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let n = readme.lines().count();
    assert!(n < 450, "the README has {n} lines: move reference material to docs/");
    for doc in documents().iter().skip(1) {
        let name = format!("docs/{}", doc.file_name().unwrap().to_str().unwrap());
        assert!(readme.contains(&format!("]({name}")), "the README does not link {name}");
    }
}

#[test]
fn docs_flags_is_the_help_the_binary_prints() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    let doc = std::fs::read_to_string(root().join("docs/flags.md")).unwrap();
    let block = doc.split("```text\n").nth(1).and_then(|b| b.split("\n```").next());
    let block = block.unwrap_or_else(|| panic!("no text block in docs/flags.md"));
    assert!(
        block.trim_end() == help.trim_end(),
        "docs/flags.md differs from --help: regenerate it with\n  \
         cargo run -- --help  (and paste it into the block)"
    );
}

/// Each `cgmon-rs …` line of the README's code blocks (continuations joined, comments cut),
/// with `sudo` left out.
fn readme_commands() -> Vec<String> {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let mut out = Vec::new();
    let mut fence = false;
    let mut joined = String::new();
    for l in readme.lines() {
        if l.trim_start().starts_with("```") {
            fence = !fence;
            continue;
        }
        if !fence {
            continue;
        }
        let code = l.split(" # ").next().unwrap_or(l).trim_end();
        match code.strip_suffix('\\') {
            Some(part) => joined.push_str(part),
            None => {
                joined.push_str(code);
                let line = std::mem::take(&mut joined);
                let line = line.trim().trim_start_matches("sudo ").to_string();
                if let Some(i) = line.find("cgmon-rs ") {
                    // `… && cgmon-rs …` and `VAR=x cgmon-rs …`: from the command on.
                    let prefix = &line[..i];
                    if prefix.is_empty() || prefix.ends_with("&& ") || prefix.contains('=') {
                        out.push(line);
                    }
                } else if line == "cgmon-rs" {
                    out.push(line);
                }
            }
        }
    }
    out
}

/// Every `cgmon-rs` command line the README shows runs: a monitor line for two seconds
/// (it must start and stop cleanly, exit 0), `diagnose` for its time, `report` on a run's
/// files. Addresses and directories are made the test's own; a `| jq` tail is dropped.
#[test]
fn every_cgmon_rs_command_line_the_readme_shows_runs() {
    let cmds = readme_commands();
    assert!(cmds.len() >= 10, "{cmds:#?}");
    let root_user = unsafe { libc::geteuid() } == 0;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap().to_string();
    std::fs::create_dir_all(dir.path().join("cgmon")).unwrap();
    std::fs::create_dir_all(dir.path().join("output")).unwrap();
    let mut ran = 0;
    for cmd in &cmds {
        if cmd.contains("--netns all") && !root_user {
            eprintln!("skipped (needs root): {cmd}");
            continue;
        }
        let c = cmd
            .split(" | ")
            .next()
            .unwrap()
            .trim_end_matches(" &")
            .replace("/tmp/cgmon-samples", &format!("{d}/cgmon-samples"))
            .replace("/tmp/cgmon", &format!("{d}/cgmon"))
            .replace("-writer-dir output", &format!("-writer-dir {d}/output"))
            .replace(" samples.ndjson.gz", &format!(" {d}/samples.ndjson.gz"))
            .replace("127.0.0.1:9464", "127.0.0.1:0")
            .replace("127.0.0.1:9464", "127.0.0.1:0")
            .replace("--seconds 30", "--seconds 2")
            .replace("diagnose --netns all", "diagnose --seconds 2 --netns all")
            .replace("/var/lib/cgmon-rs/spool", &format!("{d}/spool"))
            .replace("-o report.html", &format!("-o {d}/report.html"));
        let sub = c.contains("cgmon-rs report ") || c.contains("cgmon-rs diagnose ");
        // A monitor runs two seconds: the duration goes first, before any filter words.
        let bin = if sub { BIN.to_string() } else { format!("{BIN} -run-duration 2s") };
        let line = format!("{} >/dev/null", c.replacen("cgmon-rs", &bin, 1));
        let out = Command::new("sh").arg("-c").arg(&line).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        if cmd.contains("--clickhouse ") {
            // The fleet line points at a server that is not there: it must start (not a
            // usage error) and spool; docs/fleet.md's block runs it against a real server
            // (`the_readmes_fleet_example_runs`).
            assert_ne!(out.status.code(), Some(2), "{cmd}: {err}");
        } else {
            assert!(out.status.success(), "{cmd}\n(as {line}): {}: {err}", out.status);
        }
        ran += 1;
    }
    eprintln!("ran {ran} of the README's {} command lines", cmds.len());
}

/// The README's example record, shortened, says nothing the schema does not allow: every
/// field it shows exists, under that name and type, and every value is one a record can
/// hold (the schema with its `required` lists taken out, for the fields left out).
#[test]
fn the_readmes_example_record_fits_the_schema() {
    fn loosen(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                m.remove("required");
                m.values_mut().for_each(loosen);
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(loosen),
            _ => {}
        }
    }
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let json = readme.split("```json\n").nth(1).and_then(|b| b.split("\n```").next()).unwrap();
    let record: serde_json::Value = serde_json::from_str(json).unwrap();
    let mut schema: serde_json::Value = serde_json::from_str(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/schema/flow-record.schema.json"
    )))
    .unwrap();
    loosen(&mut schema);
    let v = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = v.iter_errors(&record).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:#?}");
    // And the check bites: a cause no rule gives is refused.
    let mut bad = record.clone();
    bad["Diagnosis"]["Cause"] = "small-window".into();
    assert!(!v.is_valid(&bad));
}

/// Every `src/…` path a text names, its trailing punctuation cut.
fn source_paths(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in text.match_indices("src/") {
        if text[..i].ends_with(|c: char| c.is_alphanumeric() || c == '/' || c == '_') {
            continue; // part of a longer path (`benches/src/…`, `crate_src/`)
        }
        let p: String = text[i..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || matches!(c, '/' | '_' | '.' | '-'))
            .collect();
        out.push(p.trim_end_matches(['.', ',']).to_string());
    }
    out
}

#[test]
fn every_source_path_the_docs_name_exists() {
    let mut missing = Vec::new();
    let mut checked = 0;
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for p in source_paths(&text) {
            checked += 1;
            if !root().join(&p).exists() {
                missing.push(format!("{}: {p}", doc.display()));
            }
        }
    }
    assert!(checked > 10, "only {checked} paths: is the scan reading them?");
    assert!(missing.is_empty(), "paths that do not exist:\n{}", missing.join("\n"));
    let t = "see `src/who/services.rs`, and src/poll/. Not tests/src/x.";
    assert_eq!(source_paths(t), ["src/who/services.rs", "src/poll/"]);
}

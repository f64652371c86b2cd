use std::time::Duration;

use super::*;
use crate::stats::summary::QuantileKind;
use crate::writer::Target;

fn run(args: &[&str]) -> Result<Config, UsageError> {
    match parse(args.iter().map(|s| s.to_string()))? {
        Parsed::Run(c) => Ok(*c),
        Parsed::Print(p) => panic!("expected a run, got print: {p}"),
    }
}

fn err(args: &[&str]) -> String {
    run(args).expect_err("should be refused").0
}

#[test]
fn cgmon_readme_command_parses_unchanged() {
    let c = run(&[
        "-netlink-sport",
        "80,443",
        "-tracker-max-flows",
        "100",
        "-writer-dir",
        "output",
        "-writer-rotate-size",
        "10M",
        "-run-interval",
        "100ms",
    ])
    .unwrap();

    assert_eq!(c.settings.tracker.max_flows, 100);
    assert!(
        matches!(&c.settings.writer.target, Target::File(f) if f.dir == std::path::Path::new("output"))
    );
    assert_eq!(c.settings.writer.rotate_size, Some(10 << 20));
    assert_eq!(c.settings.task.interval, Duration::from_millis(100));
    assert!(c.settings.sampler.filter.is_some());
}

#[test]
fn defaults_are_cgmons() {
    let c = run(&[]).unwrap();
    let s = &c.settings;
    assert_eq!(s.task.interval, Duration::from_secs(1));
    assert_eq!(s.task.error_delay, Duration::from_secs(1));
    assert_eq!(s.task.max_errors, 5);
    assert_eq!(s.shutdown_timeout, Duration::from_secs(15));
    assert_eq!(s.run_duration, Duration::ZERO);
    assert_eq!(s.writer.rotate_interval, Some(Duration::from_secs(15 * 60)));
    assert_eq!(s.writer.rotate_size, None);
    assert!(matches!(s.writer.target, Target::Stdout));
    assert!(!s.writer.pretty);
    assert_eq!(s.sampler.read_bufsize, 32768);
    assert_eq!(s.sampler.recv_timeout, Duration::from_secs(1));
    assert!(!s.analyzer.write_partial && !c.serial);
    assert_eq!(s.analyzer.analysis.quantile, QuantileKind::LinInterp);
    assert!(s.sampler.filter.is_none());
    let c = run(&["-writer-dir", "out"]).unwrap();
    let Target::File(f) = &c.settings.writer.target else { panic!("a file") };
    assert_eq!(f.name, format!("cgmon-{}.json.gz", hostname()));
    // The one default that is not cgmon's, on measurement (docs/cgmon.md, "Flags").
    assert_eq!(f.level, 1);
}

#[test]
fn single_and_double_dash_and_equals_are_the_same() {
    for args in [
        &["-run-interval", "250ms"][..],
        &["--run-interval", "250ms"],
        &["-run-interval=250ms"],
        &["--run-interval=250ms"],
    ] {
        assert_eq!(
            run(args).unwrap().settings.task.interval,
            Duration::from_millis(250),
            "{args:?}"
        );
    }
}

#[test]
fn go_style_booleans() {
    assert!(run(&["-writer-partial"]).unwrap().settings.analyzer.write_partial);
    assert!(run(&["-writer-partial=true"]).unwrap().settings.analyzer.write_partial);
    assert!(!run(&["-writer-partial=false"]).unwrap().settings.analyzer.write_partial);
    assert!(run(&["--writer-partial=1"]).unwrap().settings.analyzer.write_partial);
    // As in Go, a bare word after a boolean is not its value: here it is a filter word.
    assert!(err(&["-writer-partial", "false"]).contains("false"));
}

/// A boolean that is on by default keeps its default, and `=false` turns it off.
#[test]
fn a_boolean_on_by_default_stays_on_until_turned_off() {
    let sink = |args: &[&str]| {
        let mut all = vec!["--clickhouse", "http://127.0.0.1:8123/"];
        all.extend_from_slice(args);
        run(&all).unwrap().settings.sink.expect("the sink is on").compress
    };
    assert!(sink(&[]));
    assert!(sink(&["-clickhouse-compress"]));
    assert!(!sink(&["-clickhouse-compress=false"]));
    // Off-by-default booleans are untouched by it.
    assert!(!run(&[]).unwrap().settings.analyzer.write_partial);
}

#[test]
fn filter_words_and_flag_combine_with_port_lists() {
    let c = run(&["-netlink-dport", "443", "src", "127.0.0.0/8"]).unwrap();
    let f = format!("{:?}", c.settings.sampler.filter.unwrap());
    assert!(f.contains("And"), "{f}");
    let c = run(&["--filter", "dport 443 or sport 22"]).unwrap();
    assert!(format!("{:?}", c.settings.sampler.filter.unwrap()).contains("Or"));
    assert!(err(&["--filter", "dport 1", "sport", "2"]).contains("not both"));
}

#[test]
fn flags_after_the_filter_words_are_flags() {
    let c =
        run(&["dport", "443", "-run-interval", "100ms", "-writer-partial", "or", "sport", "22"])
            .unwrap();
    assert_eq!(c.settings.task.interval, Duration::from_millis(100));
    assert!(c.settings.analyzer.write_partial);
    assert!(format!("{:?}", c.settings.sampler.filter.unwrap()).starts_with("Or("));
    // A range's far end stays filter; so does everything after `--`.
    let c = run(&["sport", "80", "-90", "-run-interval", "2s"]).unwrap();
    assert_eq!(
        format!("{:?}", c.settings.sampler.filter.unwrap()),
        "Port { side: Local, lo: 80, hi: 90 }"
    );
    assert_eq!(c.settings.task.interval, Duration::from_secs(2));
    assert!(err(&["sport", "80", "--", "-run-interval", "2s"]).contains("\"-run-interval\""));
    assert!(matches!(parse(["dport", "443", "-h"].map(String::from)), Ok(Parsed::Print(_))));
    // A flag left without its value is not given the first filter word.
    let e = err(&["dport", "443", "-run-interval"]);
    assert!(e.contains("a value is required for '--run-interval"), "{e}");
    // A misspelt flag after the filter is named as a flag, not as a filter word.
    let e = err(&["dport", "443", "-run-intervall", "2s"]);
    assert!(e.contains("unexpected argument '--run-intervall'"), "{e}");
}

#[test]
fn bad_values_are_one_line_naming_flag_and_value() {
    for (args, flag, value) in [
        (&["-run-interval", "0"][..], "run-interval", "0"),
        (&["-run-interval", "soon"], "run-interval", "soon"),
        (&["-run-interval", "-5s"], "run-interval", "-5s"),
        (&["-writer-rotate-size", "10X"], "writer-rotate-size", "10X"),
        (&["-netlink-sport", "80,http"], "netlink-sport", "80,http"),
        (&["-netlink-dport", "70000"], "netlink-dport", "70000"),
        (&["-writer-compression-level", "10"], "writer-compression-level", "10"),
        (&["-writer-compression-level", "0"], "writer-compression-level", "0"),
        (&["-analyzer-cumulant-kind", "median"], "analyzer-cumulant-kind", "median"),
        (&["-tracker-max-flows", "-1"], "tracker-max-flows", "-1"),
        (&["--states", "established,bogus"], "states", "bogus"),
        (&["-writer-file", "a/b.gz"], "writer-file", "a/b.gz"),
    ] {
        let e = err(args);
        assert!(!e.contains('\n'), "{args:?}: {e}");
        assert!(e.contains(flag) && e.contains(value), "{args:?}: {e}");
    }
    assert!(err(&["-no-such-flag"]).contains("no-such-flag"));
    assert!(err(&["dport", "banana"]).contains("banana"));
    let both = err(&["-analyzer-adjusted-correlation-1", "-analyzer-adjusted-correlation-2"]);
    assert!(both.contains("exclude"));
}

#[test]
fn one_line_errors_keep_clap_s_choices_and_suggestions() {
    assert_eq!(
        err(&["-analyzer-cumulant-kind", "empirica"]),
        "invalid value 'empirica' for '--analyzer-cumulant-kind <CUMULANT_KIND>'; possible \
         values: lininterp, empirical; a similar value exists: 'empirical'"
    );
    // A misspelt flag names the one meant, and not clap's advice on passing it as a value.
    assert_eq!(
        err(&["-writer-compresion-level", "3"]),
        "unexpected argument '--writer-compresion-level' found; a similar argument exists: \
         '--writer-compression-level'"
    );
}

#[test]
fn a_missing_argument_is_named_on_the_same_line() {
    let e = <crate::report::ReportCli as clap::Parser>::try_parse_from(["report"]).unwrap_err();
    let line = crate::cli::one_line(&e.to_string());
    assert!(line.ends_with("not provided: --output <FILE>, <RECORDS>..."), "{line}");
}

#[test]
fn help_and_version() {
    let Parsed::Print(h) = parse(["--help".to_string()]).unwrap() else { panic!() };
    for want in ["EXIT STATUS", "EXAMPLES", "-run-interval", "[default: 1s]", "SIGHUP", "CGMON_"] {
        assert!(h.contains(want), "help lacks {want:?}");
    }
    // Every subcommand, and every path the HTTP server answers.
    for sub in ["cgmon-rs diagnose", "cgmon-rs report", "cgmon-rs plot"] {
        assert!(h.contains(sub), "help lacks {sub:?}");
    }
    let paths = h.split("HTTP PATHS (with").nth(1).expect("an HTTP PATHS section");
    for p in crate::http::PATHS {
        let listed = paths.split_whitespace().any(|w| w.trim_end_matches(',') == p)
            || (p == "/static/{file}" && paths.contains("/static/style.css"))
            || (p == "/flow/{cookie}/live" && paths.contains("/flow/{cookie}/live"));
        assert!(listed, "help lacks the path {p}: {paths}");
    }
    for v in ["-version", "--version", "-V"] {
        let Parsed::Print(s) = parse([v.to_string()]).unwrap() else { panic!() };
        assert_eq!(s, format!("cgmon-rs version {}\n", env!("CARGO_PKG_VERSION")), "{v}");
    }
}

#[test]
fn normalize_leaves_values_and_short_flags_alone() {
    let v = normalize(["-h", "-run-duration", "-5s", "--", "-run-serial"].map(String::from));
    assert_eq!(v, ["-h", "--run-duration=-5s", "--", "-run-serial"]);
}

#[test]
fn readable_aliases_sit_beside_cgmons_names() {
    let c = run(&["--interval", "2s", "-max-flows", "7", "--output-dir=out", "--partial"]).unwrap();
    assert_eq!(c.settings.task.interval, Duration::from_secs(2));
    assert_eq!(c.settings.tracker.max_flows, 7);
    assert!(
        matches!(&c.settings.writer.target, Target::File(f) if f.dir == std::path::Path::new("out"))
    );
    assert!(c.settings.analyzer.write_partial);
}

#[test]
fn http_server_address_forms() {
    let c = run(&["-run-http-server", ":9090"]).unwrap();
    assert_eq!(c.settings.http.unwrap().addr, "[::]:9090".parse().unwrap());
    let c = run(&["-run-http-server", "127.0.0.1:8080"]).unwrap();
    assert_eq!(c.settings.http.unwrap().addr.port(), 8080);
    assert!(err(&["-run-http-server", "localhost"]).contains("localhost"));
}

proptest::proptest! {
    /// Wherever the flags stand among the filter words, the configuration is the one the
    /// flags-first command line gives.
    #[test]
    fn flags_anywhere_among_the_filter_words_parse_as_flags_first(
        at in proptest::collection::vec(proptest::option::of(0usize..=11), 6),
    ) {
        let groups: [&[&str]; 6] = [
            &["-run-interval", "250ms"],
            &["--writer-partial"],
            &["-tracker-max-flows", "7"],
            &["--states", "established"],
            &["-analyzer-cumulant-kind=empirical"],
            &["-writer-compression-level", "3"],
        ];
        let words = ["sport", "80", "-90", "or", "(", "dport", "443", "and", "src", "10.0.0.0/8", ")"];
        let mut flags_first: Vec<&str> = Vec::new();
        let mut mixed: Vec<&str> = Vec::new();
        for pos in 0..=words.len() {
            for (g, a) in groups.iter().zip(&at) {
                if *a == Some(pos) {
                    mixed.extend_from_slice(g);
                }
            }
            mixed.extend(words.get(pos));
        }
        for (g, a) in groups.iter().zip(&at) {
            if a.is_some() {
                flags_first.extend_from_slice(g);
            }
        }
        flags_first.extend_from_slice(&words);
        let want = format!("{:?}", run(&flags_first).unwrap());
        proptest::prop_assert_eq!(format!("{:?}", run(&mixed).unwrap()), want);
    }
}

#[test]
fn the_filter_is_compiled_once_here_for_the_sampler() {
    let Ok(Parsed::Run(cfg)) = parse(["dport".to_string(), "5201".to_string()]) else {
        panic!("a run")
    };
    let f = cfg.settings.sampler.filter.as_ref().unwrap();
    let with_listeners = f.clone().or_listeners();
    assert_eq!(
        cfg.settings.sampler.bytecode,
        Some(crate::filter::compile(&with_listeners).unwrap())
    );
    let Ok(Parsed::Run(none)) = parse(Vec::<String>::new()) else { panic!("a run") };
    assert_eq!((none.settings.sampler.filter, none.settings.sampler.bytecode), (None, None));
}

#[test]
fn log_switches_resolve_to_directives() {
    let c = run(&["--log-netlink", "--log-writer"]).unwrap();
    assert_eq!(c.log.directives, "info,cgmon_rs::sampler=debug,cgmon_rs::writer=debug");
    let c = run(&["--log-all", "--log-level", "warn", "-log-format", "json"]).unwrap();
    assert_eq!(c.log.directives.matches("=debug").count(), 4);
    assert!(c.log.directives.starts_with("warn,"));
    assert_eq!(c.log.format, crate::logging::LogFormat::Json);
}

#[test]
fn cpu_budget_is_a_percentage_of_one_core_and_zero_turns_tiers_off() {
    let c = run(&[]).unwrap();
    assert_eq!(c.settings.task.cpu_budget, crate::poll::pace::DEFAULT_CPU_BUDGET);
    assert!(c.settings.tracker.tiers);
    for (arg, want) in [("5", 0.05), ("0.5%", 0.005), ("100", 1.0)] {
        let c = run(&["-cpu-budget", arg]).unwrap();
        assert!((c.settings.task.cpu_budget - want).abs() < 1e-12, "{arg}");
    }
    let c = run(&["--cpu-budget", "0"]).unwrap();
    assert!(!c.settings.tracker.tiers && c.settings.task.cpu_budget == 0.0);
    // A flow stays hot ten ticks, and at least a second.
    let c = run(&["-run-interval", "10ms"]).unwrap();
    assert_eq!(c.settings.tracker.hot_linger_ns, 1_000_000_000);
    let c = run(&["-run-interval", "1s"]).unwrap();
    assert_eq!(c.settings.tracker.hot_linger_ns, 10_000_000_000);
    for bad in ["150", "-1", "two", ""] {
        let e = err(&["--cpu-budget", bad]);
        assert!(e.contains(&format!("{bad:?}")) && e.contains("percentage"), "{e}");
    }
}

#[test]
fn the_budget_alone_sets_the_pace_unless_a_cap_is_given() {
    assert_eq!(run(&[]).unwrap().settings.task.max_full_interval, None);
    let c = run(&["--max-full-interval", "30s"]).unwrap();
    assert_eq!(c.settings.task.max_full_interval, Some(Duration::from_secs(30)));
    for bad in ["0", "ten", "-5s"] {
        let e = err(&["--max-full-interval", bad]);
        assert!(e.contains(bad) && e.contains("--max-full-interval"), "{e}");
    }
}

#[test]
fn issue_32_flag_edges() {
    // A size rotation of 0 is none, as an interval of 0 is.
    let c = run(&["-writer-dir", "/tmp", "-writer-rotate-size", "0"]).unwrap();
    assert_eq!(c.settings.writer.rotate_size, None);
    for bad in ["0", "1", "1023K", "17G", "999999T"] {
        let e = err(&["--writer-backlog", bad]);
        assert!(e.contains("--writer-backlog") && e.contains(&format!("'{bad}'")), "{e}");
    }
    assert_eq!(run(&["--writer-backlog", "1M"]).unwrap().settings.writer.backlog_bytes, 1 << 20);
    let e = err(&["--netlink-receive-bufsize", "2G"]);
    assert!(e.contains("--netlink-receive-bufsize") && e.contains("'2G'"), "{e}");
    let e = err(&["--netns", ""]);
    assert!(e.contains("--netns") && e.contains("empty"), "{e}");
    let long = format!("dport {}", "9".repeat(100_000));
    let e = err(&["--filter", &long]);
    assert!(e.len() < 700 && e.contains("bytes in all"), "{} bytes", e.len());
    // Retention: the files of both outputs share the bound.
    let c = run(&[
        "-writer-dir",
        "/tmp",
        "--writer-keep-files",
        "3",
        "--writer-keep-size",
        "1G",
        "--samples-out",
        "/tmp/s.gz",
    ])
    .unwrap();
    let keep = crate::writer::file::Keep { files: 3, bytes: 1 << 30 };
    assert!(matches!(&c.settings.writer.target, Target::File(f) if f.keep == keep));
    assert_eq!(c.settings.samples_out.as_ref().unwrap().keep, keep);
}

#[test]
fn the_units_retention_values_parse() {
    let unit = include_str!("../../examples/systemd/cgmon-rs.service");
    let mut seen = 0;
    for line in unit.lines().filter_map(|l| l.strip_prefix("Environment=CGMON_WRITER_KEEP_")) {
        let (name, value) = line.split_once('=').unwrap();
        let flag = format!("--writer-keep-{}", name.to_lowercase());
        let c = run(&["-writer-dir", "/tmp", &flag, value]).unwrap();
        let Target::File(f) = &c.settings.writer.target else { panic!("a file") };
        assert!(!f.keep.unbounded(), "{flag} {value}");
        seen += 1;
    }
    assert_eq!(seen, 2, "the unit bounds both the count and the size");
}

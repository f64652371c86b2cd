//! The catalogue's own checks.

use super::*;

#[test]
fn names_are_prometheus_names_and_families_are_consecutive() {
    let mut seen = std::collections::HashSet::new();
    let mut last = "";
    for s in SERIES {
        assert!(s.name.starts_with("cgmon_"), "{}", s.name);
        assert!(
            s.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
            "{}",
            s.name
        );
        assert!(!s.name.ends_with("_total"), "the encoder adds _total: {}", s.name);
        if s.name != last {
            assert!(seen.insert(s.name), "{} split in two", s.name);
        } else {
            assert!(s.label.is_some(), "{} twice without a label", s.name);
        }
        last = s.name;
        assert!(!s.says.is_empty() && !s.help.is_empty());
    }
}

#[test]
fn values_scale_to_base_units() {
    let m = Metrics::default();
    m.full_dump_interval_ns.set(1_500_000_000);
    m.cpu_budget_ppm.set(20_000);
    m.records_lost.add(3);
    let find = |n: &str| SERIES.iter().find(|s| s.name == n).unwrap();
    assert_eq!(find("cgmon_full_dump_interval_seconds").value(&m), 1.5);
    assert_eq!(find("cgmon_full_dump_interval_seconds").shown(&m), "1.500 s");
    assert_eq!(find("cgmon_cpu_budget_ratio").value(&m), 0.02);
    assert_eq!(find("cgmon_cpu_budget_ratio").shown(&m), "2.00 %");
    assert_eq!(find("cgmon_records_lost").shown(&m), "3");
    assert_eq!(find("cgmon_records_lost").phrase(&m), "3 lost (output failed)");
    m.dump_seconds.observe(std::time::Duration::from_millis(2));
    assert_eq!(find("cgmon_dump_duration_seconds").shown(&m), "1, mean 2.000 ms");
    assert_eq!(find("cgmon_dump_duration_seconds").phrase(&m), "1 dumps timed (mean 2.000 ms)");
}

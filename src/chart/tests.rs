use super::flow::{CHART_IDS, charts};
use super::*;
use crate::record::Point;

/// Unix time of the tests' first sample: 2026-11-24 00:00:00 UTC.
const T0: f64 = 1_795_478_400.0;

fn point(t: f64, rtt: Option<f64>) -> Point {
    Point {
        unix_s: T0 + t,
        rtt_ms: rtt,
        cwnd_bytes: Some(14_480.0 * (1.0 + t)),
        ssthresh_bytes: None,
        pacing_mbps: Some(100.0),
        delivery_mbps: None,
        retrans: Some(t.floor()),
        chrono_ms: Some([t * 1000.0, t * 500.0, 0.0]),
        after_pause: false,
    }
}

/// The samples each polyline of `series` stands for (its `data-n`).
fn drawn_samples(svg: &str, series: &str) -> usize {
    let tag = format!(r#"data-series="{series}" data-n=""#);
    svg.split(&tag).skip(1).map(|p| p.split('"').next().unwrap().parse::<usize>().unwrap()).sum()
}

/// The points of a polyline's `points` attribute.
fn polyline_points(svg: &str, series: &str) -> Vec<Vec<(f64, f64)>> {
    let tag = format!(r#"data-series="{series}""#);
    svg.split("<polyline")
        .skip(1)
        .filter(|p| p.contains(&tag))
        .map(|p| {
            let a = p.split(r#"points=""#).nth(1).unwrap().split('"').next().unwrap();
            a.split(' ')
                .filter(|s| !s.is_empty())
                .map(|xy| {
                    let (x, y) = xy.split_once(',').unwrap();
                    (x.parse().unwrap(), y.parse().unwrap())
                })
                .collect()
        })
        .collect()
}

#[test]
fn every_sample_is_a_point_and_a_missing_value_breaks_the_line() {
    let pts: Vec<Point> = (0..10)
        .map(|i| point(f64::from(i) * 0.1, (i != 4).then_some(10.0 + f64::from(i))))
        .collect();
    let c = charts("f-", &pts, Some(9.5), None);
    assert_eq!(
        c.iter().map(|c| c.id.clone()).collect::<Vec<_>>(),
        CHART_IDS.map(|k| format!("f-{k}"))
    );
    let rtt = &c[0];
    assert_eq!(rtt.series[0].runs.len(), 2, "the sample without an RTT splits the line");
    assert_eq!(rtt.series[0].points(), 9);
    // The first run's last value holds until the sample without one.
    assert!((rtt.series[0].holds[0] - 0.4).abs() < 1e-6, "{:?}", rtt.series[0].holds);
    let svg = rtt.svg();
    assert_eq!(drawn_samples(&svg, "rtt"), 9);
    let drawn = polyline_points(&svg, "rtt");
    // Steps: across at the old value, then up; time runs left to right and a larger RTT
    // is drawn higher (smaller y).
    assert_eq!(drawn[1].len(), 9, "five samples: each after the first adds its corner");
    assert_eq!(drawn[0].len(), 4 + 3 + 1, "and the first run its hold");
    assert!(drawn[1].windows(2).all(|w| w[1].0 >= w[0].0 && w[1].1 <= w[0].1));
    assert!(drawn[1].windows(2).all(|w| w[1].0 == w[0].0 || w[1].1 == w[0].1), "no slopes");
    // The minimum RTT is marked, and the axis starts at 0 and covers the largest value.
    assert!(svg.contains(r#"data-mark="minrtt""#));
    assert_eq!(rtt.y.min, 0.0);
    assert!(rtt.y.max >= 19.0 && rtt.y.max <= 20.0, "{:?}", rtt.y);
    assert_eq!(rtt.y.title, "RTT (ms)");
    // The screen-reader text names what is drawn.
    assert!(
        svg.contains(r#"role="img""#)
            && svg.contains("<title id=\"f-rtt-t\">Round-trip time</title>")
    );
    assert!(rtt.desc.contains("9 values from 10.0 to 19.0 ms"), "{}", rtt.desc);
    assert!(rtt.desc.contains("min RTT: 9.50 ms"), "{}", rtt.desc);
}

#[test]
fn units_scale_with_the_range() {
    let pts: Vec<Point> = (0..3).map(|i| point(f64::from(i), Some(1.0))).collect();
    let c = charts("", &pts, None, None);
    // cwnd reaches 43,440 bytes: the axis is in KB.
    assert_eq!(c[1].y.title, "window (KB)");
    assert_eq!(c[1].y_div, 1e3);
    assert!(c[1].y.max >= 43.44);
    assert_eq!(c[2].y.title, "rate (Mbit/s)");
    assert_eq!(c[3].y.title, "retransmits (segments)");
    assert_eq!((c[4].y.min, c[4].y.max), (0.0, 100.0));
    assert_eq!(value_axis("rate", Unit::Mbps, 0.0, 2500.0).0.title, "rate (Gbit/s)");
    assert_eq!(value_axis("rate", Unit::Mbps, 0.0, 0.2).0.title, "rate (kbit/s)");
    // Absent series draw nothing: no delivery rate, ssthresh still infinite.
    assert_eq!(c[2].series[1].points(), 0);
    assert_eq!(c[2].series[0].points(), 3);
    assert_eq!(c[1].series[1].points(), 0);
}

#[test]
fn time_shares_grow_from_the_first_sample() {
    let pts: Vec<Point> = (0..5).map(|i| point(f64::from(i), Some(1.0))).collect();
    let c = charts("", &pts, None, None);
    let shares = &c[4];
    // busy grows 1000 ms per second: 100 %; rwnd 500 ms per second: 50 %; the first
    // sample has no elapsed time and no share.
    assert_eq!(
        shares.series[0].runs,
        vec![(1..5).map(|i| (f64::from(i), 100.0)).collect::<Vec<_>>()]
    );
    assert!(shares.series[1].runs[0].iter().all(|p| p.1 == 50.0));
    assert!(shares.series[2].runs[0].iter().all(|p| p.1 == 0.0));
}

#[test]
fn empty_and_single_sample_charts_render() {
    let c = charts("", &[], None, None);
    assert_eq!(c.len(), 5);
    for chart in &c {
        let svg = chart.svg();
        assert!(svg.contains("no samples"), "{svg}");
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
    }
    let one = charts("", &[point(0.0, Some(5.0))], None, None);
    let svg = one[0].svg();
    // One sample is a dot, not an invisible one-point line.
    assert!(svg.contains(r#"data-dot="rtt""#), "{svg}");
    assert_eq!(polyline_points(&svg, "rtt").concat().len(), 1);
    // Held until the flow's last (deduped) sample, it is a line.
    let held = charts("", &[point(0.0, Some(5.0))], None, Some(T0 + 3.0));
    assert_eq!(held[0].series[0].runs, vec![vec![(0.0, 5.0)]]);
    assert_eq!(held[0].series[0].holds, vec![3.0]);
    assert!(!held[0].svg().contains("data-dot"));
    assert_eq!(held[0].x.max, 3.0);
    assert_eq!(one[0].x.max, 1.0, "a zero span still gets an axis");
}

#[test]
fn values_hold_between_samples_and_only_a_pause_breaks_the_line() {
    // A receiver-limited download: samples kept only when something changed (0, 0.1, 5,
    // 5.1, 9), every 100 ms tick seen; then the monitor saw nothing for 20 s.
    let mut pts: Vec<Point> =
        [0.0, 0.1, 5.0, 5.1, 9.0, 29.0, 29.1].iter().map(|&t| point(t, Some(10.0 + t))).collect();
    pts[5].after_pause = true;
    let c = charts("", &pts, None, Some(T0 + 30.0));
    let rtt = &c[0];
    assert_eq!(rtt.series[0].runs.len(), 2, "one break, at the pause");
    assert_eq!(rtt.series[0].runs[0].len(), 5);
    assert!(
        (rtt.series[0].holds[0] - 9.0).abs() < 1e-6,
        "no hold past the last sample before a pause"
    );
    assert!((rtt.series[0].holds[1] - 30.0).abs() < 1e-6, "held to the end");
    assert_eq!(rtt.pauses.len(), 1);
    assert!((rtt.pauses[0].0 - 9.0).abs() < 1e-6 && (rtt.pauses[0].1 - 29.0).abs() < 1e-6);
    let svg = rtt.svg();
    assert_eq!(svg.matches("data-pause").count(), 1);
    assert!(svg.contains("<title>not sampled for 20.0 s</title>"), "{svg}");
    assert!(rtt.desc.contains("with 1 pause in sampling"), "{}", rtt.desc);
    // The cumulative retransmits hold too: a step per change, no lone dots.
    assert!(!c[3].svg().contains("data-dot"));
    // The runs themselves: a value missing ends a run held up to it.
    let r = runs([(0.0, Some(1.0), false), (1.0, None, false), (2.0, Some(2.0), false)], 3.0);
    assert_eq!(r, (vec![vec![(0.0, 1.0)], vec![(2.0, 2.0)]], vec![1.0, 3.0]));
}

#[test]
fn time_ticks_fall_on_round_times_within_the_span() {
    let a = time_axis(T0 + 0.3, 125.0);
    assert!(a.ticks.len() >= 3 && a.ticks.len() <= 8, "{:?}", a.ticks);
    for (t, _) in &a.ticks {
        assert!((0.0..=125.0).contains(t));
        let wall = T0 + 0.3 + t;
        assert!((wall - wall.round()).abs() < 1e-6, "tick at {wall}");
    }
    let step = a.ticks[1].0 - a.ticks[0].0;
    assert_eq!(step, 30.0);
    assert!(a.title.starts_with("time (2026-11-2"), "{}", a.title);
    let sub = time_axis(T0 + 0.3, 0.9);
    let labels: Vec<&str> = sub.ticks.iter().map(|t| t.1.as_str()).collect();
    // Ticks every 0.2 s at round tenths, each labelled once (0.4 is not shown as 0.3).
    assert_eq!(
        labels.iter().map(|l| &l[l.len() - 4..]).collect::<Vec<_>>(),
        ["00.4", "00.6", "00.8", "01.0"],
        "{labels:?}"
    );
}

#[test]
fn sparkline_scales_to_its_box_holds_values_and_breaks_on_missing_ones() {
    let v = [
        (0.0, Some(1.0), false),
        (1.0, Some(2.0), false),
        (2.0, None, false),
        (3.0, Some(4.0), false),
    ];
    let s = sparkline(&v, 4.0, 4.0, (60.0, 16.0), "rtt", "RTT <ms>");
    let lines = polyline_points(&s.replace("class=\"s-rtt\"", "data-series=\"rtt\""), "rtt");
    // 1 then a step to 2 held until the missing value; 4 held until the end.
    assert_eq!(lines.iter().map(Vec::len).collect::<Vec<_>>(), vec![4, 2]);
    for (x, y) in lines.concat() {
        assert!((0.0..=60.0).contains(&x) && (0.0..=16.0).contains(&y));
    }
    // The largest value touches the top and is held to the right edge; text is escaped.
    assert_eq!(lines[1], vec![(44.5, 1.0), (59.0, 1.0)]);
    assert!(s.contains("aria-label=\"RTT &lt;ms&gt;\""));
    assert!(sparkline(&[], 0.0, 60.0, (60.0, 16.0), "rtt", "empty").ends_with("</svg>"));
}

#[test]
fn px_writes_what_one_decimal_formatting_writes() {
    // Away from ties (x.x5), Px and `{:.1}` agree, sign and carries included.
    for v in [0.0, 1.0, 0.04, -0.04, -0.06, 9.96, 99.94, 123.456, -17.38, 719.99, 1e9 + 0.3] {
        let want = format!("{v:.1}").replace("-0.0", "0.0");
        assert_eq!(Px(v).to_string(), want, "{v}");
    }
    let mut x = -300.0;
    while x < 800.0 {
        assert_eq!(Px(x).to_string(), format!("{x:.1}").replace("-0.0", "0.0"), "{x}");
        x += 0.0137;
    }
    assert_eq!(Px(f64::NAN).to_string(), "NaN");
    assert_eq!(Px(f64::INFINITY).to_string(), "inf");
}

#[test]
fn a_run_longer_than_four_points_a_pixel_is_thinned_to_its_extremes() {
    let short: Vec<(f64, f64)> = (0..400).map(|i| (f64::from(i), f64::from(i % 7))).collect();
    assert!(matches!(thin(&short, 100.0, |t| t / 4.0), Cow::Borrowed(_)), "400 ≤ 4 × 100");
    // 10,000 samples over 100 columns, with one spike and one dip.
    let mut long: Vec<(f64, f64)> =
        (0..10_000).map(|i| (f64::from(i), (f64::from(i) / 300.0).sin())).collect();
    long[4321].1 = 50.0;
    long[8765].1 = -50.0;
    let col = |t: f64| t / 100.0;
    let d = thin(&long, 100.0, col);
    assert!(d.len() <= 400 && d.len() >= 200, "{} points", d.len());
    assert_eq!(d.first(), long.first());
    assert_eq!(d.last(), long.last());
    assert!(d.contains(&long[4321]) && d.contains(&long[8765]), "extremes kept");
    assert!(d.windows(2).all(|w| w[0].0 < w[1].0), "in time order");
    // Each column's lowest and highest survive.
    for c in 0..100 {
        let g: Vec<_> = long.iter().filter(|p| col(p.0).floor() == f64::from(c)).collect();
        let hi = g.iter().map(|p| p.1).fold(f64::MIN, f64::max);
        let lo = g.iter().map(|p| p.1).fold(f64::MAX, f64::min);
        let kept: Vec<_> = d.iter().filter(|p| col(p.0).floor() == f64::from(c)).collect();
        assert!(kept.iter().any(|p| p.1 == hi) && kept.iter().any(|p| p.1 == lo), "column {c}");
    }
}

#[test]
fn an_hour_of_samples_is_drawn_at_pixel_resolution() {
    let points: Vec<Point> = (0..3600).map(|i| point(f64::from(i), Some(20.0))).collect();
    let c = &charts("f-", &points, None, None)[0];
    assert_eq!(c.series[0].points(), 3600, "the model keeps every sample");
    assert!(c.desc.contains("3600 values"), "{}", c.desc);
    let drawn: usize = polyline_points(&c.svg(), "rtt").iter().map(Vec::len).sum();
    assert!(drawn > 0 && drawn <= 4 * (WIDTH - LEFT - RIGHT) as usize, "{drawn}");
}

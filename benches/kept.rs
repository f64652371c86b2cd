//! The tracker alone on the captured 20,000-socket dump, kept in memory (no replay, no
//! sampler): nanoseconds per socket per dump, for looking into the tracker's own costs.
//!
//! Unlike `benches/tracker.rs`, the figures include walking the dump's bytes (which are not
//! in cache at 20,000 sockets: 10 MB); compare builds or settings with each other, not with
//! that bench's per-socket figures. Its flows change in step: every fourth changing dump
//! moves every flow's stage to a block (`SEQ` shows it), so its median is that of the other
//! three; `benches/tracker.rs` puts flows out of step. Settings, from the environment:
//!
//! - `SECS` (default 3): how long to run; each round is one steady dump (every sample
//!   deduped) and one changing dump;
//! - `WINDOW` (default 3600): the changing tracker's `window_samples`;
//! - `EVERY` (default 1): every EVERY-th socket changes in each changing dump;
//! - `LIMIT`: use only the first LIMIT sockets (1000 keeps everything in cache, leaving
//!   the instructions' cost);
//! - `SEQ`: also print the first 140 changing dumps' costs, in order;
//! - `FRESH`: gather ended windows into new vectors, not into the last one's memory.
//!
//! The windows a dump ends are gathered after it, as the analyzer stage would, and timed
//! apart from the tracker.
//!
//! ```sh
//! cargo bench --bench kept
//! LIMIT=1000 WINDOW=64 cargo bench --bench kept
//! ```

use std::hint::black_box;

use cgmon_rs::sampler::Dump;
use cgmon_rs::tracker::{Tracker, TrackerConfig};

#[path = "common/fixture.rs"]
mod fixture;
use fixture::{bumped, load_dump};

fn setting<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v.parse().unwrap_or_else(|_| panic!("{name}={v}: not a number")),
        Err(_) => default,
    }
}

fn main() {
    let mut a = load_dump();
    if let Ok(l) = std::env::var("LIMIT") {
        a.batch.index.truncate(l.parse().expect("LIMIT: a number of sockets"));
    }
    let b = bumped(&a, setting("EVERY", 1usize));
    let n = a.batch.len() as f64;
    let secs: f64 = setting("SECS", 3.0);
    let window: usize = setting("WINDOW", 3600);
    let mut steady = Tracker::new(TrackerConfig::default());
    let mut changing =
        Tracker::new(TrackerConfig { window_samples: window, ..TrackerConfig::default() });
    let mut out = Vec::new();
    let run = |t: &mut Tracker, d: &Dump, out: &mut Vec<_>| {
        let st = std::time::Instant::now();
        t.begin_dump();
        for s in d.batch.iter() {
            t.observe(&s, out);
        }
        t.end_dump(true, 1, out);
        st.elapsed().as_secs_f64() * 1e9 / n
    };
    run(&mut steady, &a, &mut out);
    let (mut vs, mut vc) = (vec![], vec![]);
    // Ended windows are gathered as the analyzer stage does (each into the memory of the
    // one before; `FRESH` gathers into new vectors), timed apart: the analyzer's share, not
    // the tracker's.
    let (mut gathered, mut gather_ns, mut costliest_gather) = (0usize, 0.0, (0usize, 0.0));
    let fresh = std::env::var("FRESH").is_ok();
    let mut spare = Vec::new();
    let start = std::time::Instant::now();
    let mut k = 0;
    while start.elapsed().as_secs_f64() < secs {
        out.clear();
        vs.push(run(&mut steady, &a, &mut out));
        out.clear();
        vc.push(run(&mut changing, if k % 2 == 0 { &b } else { &a }, &mut out));
        let st = std::time::Instant::now();
        let mut m = 0;
        for e in &mut out {
            if fresh {
                e.gather();
            } else {
                e.gather_into(std::mem::take(&mut spare));
            }
            m += black_box(e.flow.samples.len());
            if !fresh {
                spare = std::mem::take(&mut e.flow.samples);
            }
        }
        let took = st.elapsed().as_secs_f64() * 1e9;
        (gathered, gather_ns) = (gathered + m, gather_ns + took);
        if took > costliest_gather.1 {
            costliest_gather = (m, took);
        }
        k += 1;
    }
    if std::env::var("SEQ").is_ok() {
        let seq: Vec<String> = vc.iter().take(140).map(|x| format!("{x:.0}")).collect();
        println!("changing dumps in order (ns/socket): {}", seq.join(" "));
    }
    // The mean matters as much as the median: costs that come in bursts (every flow's block
    // doubling in the same dump) move the mean, not the median.
    // The costliest changing dump shows a burst itself: with flows in step, the dump in which
    // every window ends.
    let summary = |mut v: Vec<f64>| {
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        v.sort_by(f64::total_cmp);
        (v[0], v[v.len() / 2], mean, v[v.len() - 1])
    };
    let ((s0, s1, s2, _), (c0, c1, c2, c3)) = (summary(vs), summary(vc));
    println!(
        "kept dump, {n} sockets, window {window}: steady min {s0:.1} median {s1:.1} mean \
         {s2:.1}; changing min {c0:.1} median {c1:.1} mean {c2:.1} max {c3:.0} ns/socket \
         ({k} rounds)"
    );
    if gathered > 0 {
        let (m, took) = costliest_gather;
        println!(
            "gathered apart (the analyzer's share): {gathered} samples, {:.1} ns each; the \
             costliest dump's {m} samples {:.1} ms",
            gather_ns / gathered as f64,
            took / 1e6
        );
    }
}

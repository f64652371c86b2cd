//! Tracker and analyzer costs (issue 3), side by side in one run:
//! - `tracker/replay_only`: the captured 20,000-socket dump replayed through
//!   `Sampler::dump_with` with an empty visitor (the sampler's share);
//! - `tracker/replay+steady_20k`: the same with the tracker as visitor, 20,000 flows whose
//!   values did not change (every sample deduped), the common case on a host of idle
//!   connections;
//! - `tracker/replay+changing_20k`: every sample changed (every sample retained; 64-sample
//!   windows keep memory bounded, so cuts are included);
//! - (paired figures only, with flows out of step as on a real host: each dump fills a
//!   quarter of the changing flows' stages and ends a 64th of their 64-sample windows) every
//!   sample changed with 64-sample and with the default hour-long windows (3,600 samples: no
//!   cuts); every 10th sample changed; the memory traffic of the changed path alone
//!   (`MemoryFloor`); and, apart, the dump that opens 20,000 flows;
//! - the tracker's cost per socket is (replay+X − replay_only) / 20,000;
//! - `analyze/10k_samples`: one flow record from 10,000 retained samples.
//!
//! After criterion it prints memory figures: the size of a flow and a retained sample, heap
//! bytes per tracked flow (counted by this bench's allocator, samples excluded), and the
//! process RSS while tracking 20,000 live loopback flows.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicIsize, Ordering};

use cgmon_rs::analysis::{AnalyzerConfig, analyze};
use cgmon_rs::http::web;
use cgmon_rs::sampler::fakes::ReplaySource;
use cgmon_rs::sampler::source::{NetlinkSource, SocketOptions};
use cgmon_rs::sampler::{Dump, DumpMode, Sampler, SamplerConfig};
use cgmon_rs::testkit::{ConnHolder, SockBuilder, batch};
use cgmon_rs::tracker::{Flow, Retained, Tracker, TrackerConfig};
use cgmon_rs::wire::sock::Datagram;
use criterion::{BatchSize, Criterion, Throughput};

#[path = "common/fixture.rs"]
mod fixture;
use fixture::{bumped, bumped_where, load_dump};

/// Counts live heap bytes, so memory per flow is measured rather than estimated.
struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn run_dump(t: &mut Tracker, d: &Dump, out: &mut Vec<cgmon_rs::tracker::EndedFlow>) {
    t.begin_dump();
    for s in d.batch.iter() {
        t.observe(&s, out);
    }
    t.end_dump(true, 1, out);
}

fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn main() {
    let bench_mode = std::env::args().any(|a| a == "--bench");
    if bench_mode {
        // First, in a fresh process: RSS while tracking 20,000 live flows. The holder forks
        // before any thread starts.
        let holder = ConnHolder::start("127.0.0.1:0".parse().unwrap(), 10_000).unwrap();
        live_rss();
        drop(holder);
    }

    let mut c = Criterion::default().configure_from_args().sample_size(30);
    let a = load_dump();
    let b = bumped(&a, 1);
    let n = a.batch.len() as u64;

    // Replayed through `Sampler::dump_with` as in the pipeline: each datagram is copied into
    // the receive buffer (as recv(2) does), scanned, and its sockets visited while hot. The
    // tracker's cost is the difference from the same replay with an empty visitor.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let replay = |d: &Dump| -> Sampler<ReplaySource> {
        let mut dgs = d.batch.datagrams.clone();
        dgs.push(Datagram { ts_ns: 0, bytes: cgmon_rs::testkit::control_msg(1, 3, 0) });
        let cfg = SamplerConfig { mode: DumpMode::SingleWalk, ..SamplerConfig::default() };
        Sampler::new(ReplaySource::new(dgs), cfg).unwrap()
    };
    let mut g = c.benchmark_group("tracker");
    g.throughput(Throughput::Elements(n));
    {
        // The tracker alone on the kept dump: a cold walk over 10 MB, for profiling.
        let mut t = Tracker::new(TrackerConfig::default());
        let mut out = Vec::new();
        run_dump(&mut t, &a, &mut out);
        g.bench_function("kept_steady_20k", |bch| {
            bch.iter(|| {
                run_dump(&mut t, &a, &mut out);
                black_box(out.len())
            })
        });
        let mut t = Tracker::new(TrackerConfig { window_samples: 64, ..TrackerConfig::default() });
        let mut flip = false;
        g.bench_function("kept_changing_20k", |bch| {
            bch.iter(|| {
                flip = !flip;
                out.clear();
                run_dump(&mut t, if flip { &b } else { &a }, &mut out);
                black_box(out.len())
            })
        });
    }
    g.bench_function("replay_only", |bch| {
        bch.iter_batched(
            || replay(&a),
            |mut s| {
                black_box(
                    rt.block_on(s.dump_with(|x| {
                        black_box(&x);
                    }))
                    .unwrap()
                    .sockets,
                )
            },
            BatchSize::LargeInput,
        )
    });
    let mut t = Tracker::new(TrackerConfig::default());
    let mut out = Vec::new();
    run_dump(&mut t, &a, &mut out);
    g.bench_function("replay+steady_20k", |bch| {
        bch.iter_batched(
            || replay(&a),
            |mut s| {
                t.begin_dump();
                let d = rt.block_on(s.dump_with(|x| t.observe(&x, &mut out))).unwrap();
                t.end_dump(d.is_complete(), 1, &mut out);
                black_box(out.len())
            },
            BatchSize::LargeInput,
        )
    });
    let mut t = Tracker::new(TrackerConfig { window_samples: 64, ..TrackerConfig::default() });
    let mut flip = false;
    g.bench_function("replay+changing_20k", |bch| {
        bch.iter_batched(
            || {
                flip = !flip;
                replay(if flip { &b } else { &a })
            },
            |mut s| {
                out.clear();
                t.begin_dump();
                let d = rt.block_on(s.dump_with(|x| t.observe(&x, &mut out))).unwrap();
                t.end_dump(d.is_complete(), 1, &mut out);
                black_box(out.len())
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();

    // The web view's share of the poll task (issue 23): `/` asks for the top 100 flows by
    // rate (the default page), each with its sparkline samples, and a brief of every flow; a flow page asks
    // for one flow by its index. The tracker answers between dumps, so this is how long a
    // request can hold the next dump back.
    let mut g = c.benchmark_group("view");
    let mut t = Tracker::new(TrackerConfig::default());
    for i in 0..40 {
        run_dump(&mut t, if i % 2 == 0 { &a } else { &b }, &mut out);
    }
    let ord = cgmon_rs::tracker::views::Order::Rate;
    g.bench_function("overview_20k", |bch| {
        bch.iter(|| {
            black_box(t.overview(
                ord,
                0,
                web::DEFAULT_ROWS,
                web::SPARK_SAMPLES,
                &Default::default(),
                cgmon_rs::analysis::diagnosis::so_far_index,
            ))
        })
    });
    let cookie = t.flows().next().unwrap().key.cookie;
    g.bench_function("one_flow_of_20k", |bch| {
        bch.iter(|| black_box(t.view_one(cookie, usize::MAX)))
    });
    g.finish();

    if bench_mode {
        // The same differences as interleaved pairs (replay alone, then replay + tracker),
        // median over 60 pairs: sequential criterion runs drift with the shared machine.
        let mut steady = Tracker::new(TrackerConfig::default());
        let mut changing =
            Tracker::new(TrackerConfig { window_samples: 64, ..TrackerConfig::default() });
        let mut out = Vec::new();
        run_dump(&mut steady, &a, &mut out);
        let timed = |t: Option<&mut Tracker>, d: &Dump, out: &mut Vec<_>| {
            let mut s = replay(d);
            let start = std::time::Instant::now();
            match t {
                Some(t) => {
                    t.begin_dump();
                    let r = rt.block_on(s.dump_with(|x| t.observe(&x, out))).unwrap();
                    t.end_dump(r.is_complete(), 1, out);
                }
                None => {
                    rt.block_on(s.dump_with(|x| {
                        black_box(&x);
                    }))
                    .unwrap();
                }
            }
            start.elapsed().as_secs_f64() * 1e9
        };
        let mut mixed =
            Tracker::new(TrackerConfig { window_samples: 64, ..TrackerConfig::default() });
        // Flows out of step, as on a real host. Flow i of the changing trackers is given
        // i mod 64 extra samples first (flow 10j of the mixed one, j mod 64): in each dump
        // then a quarter of the changing flows fill their stage and move it to a block, and
        // a 64th end their 64-sample window. In step (every flow opened in one dump, then
        // changing together), three dumps in four moved no stage and the median left out
        // the fourth, while one dump in 64 ended every window, which only the mean counted.
        // Opening 20,000 flows is a one-time cost, not a dump's: it is timed apart.
        let all_from = |k: usize| bumped_where(&a, move |i| (i % 64).min(k) % 2 == 1);
        let tenth_from =
            |k: usize| bumped_where(&a, move |i| i % 10 == 0 && (i / 10 % 64).min(k) % 2 == 1);
        let base = timed(None, &a, &mut out);
        let opening = (timed(Some(&mut changing), &a, &mut out) - base) / n as f64;
        let mut hour = Tracker::new(TrackerConfig::default());
        run_dump(&mut hour, &a, &mut out);
        run_dump(&mut mixed, &a, &mut out);
        for k in 1..64 {
            out.clear();
            let d = all_from(k);
            run_dump(&mut changing, &d, &mut out);
            run_dump(&mut hour, &d, &mut out);
            run_dump(&mut mixed, &tenth_from(k), &mut out);
        }
        eprintln!("tracker per socket, the dump that opens 20,000 flows: {opening:.1} ns");
        // Every flow changes in each dump from here (every 10th in the mixed one).
        let (all_even, all_odd) = (all_from(64), bumped_where(&a, |i| i % 64 % 2 == 0));
        let (tenth_even, tenth_odd) =
            (tenth_from(64), bumped_where(&a, |i| i % 10 == 0 && i / 10 % 64 % 2 == 0));
        // Hour windows, aged by 120 dumps in all: blocks of a flow changing every poll then
        // hold 120-180 samples (6-9 KB, more than a page each), as they do minutes into such
        // a flow's life.
        for k in 0..56 {
            out.clear();
            run_dump(&mut hour, if k % 2 == 0 { &all_odd } else { &all_even }, &mut out);
        }
        let retained_before = (changing.stats().samples_retained, mixed.stats().samples_retained);
        let mut floor = MemoryFloor::new(n as usize);
        let (mut ds, mut dc, mut dm, mut df) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut dh = Vec::new();
        for k in 0..60 {
            out.clear();
            let base = timed(None, &a, &mut out);
            ds.push((timed(Some(&mut steady), &a, &mut out) - base) / n as f64);
            let d = if k % 2 == 0 { &all_odd } else { &all_even };
            let base = timed(None, d, &mut out);
            dc.push((timed(Some(&mut changing), d, &mut out) - base) / n as f64);
            let base = timed(None, d, &mut out);
            dh.push((timed(Some(&mut hour), d, &mut out) - base) / n as f64);
            let d = if k % 2 == 0 { &tenth_odd } else { &tenth_even };
            let base = timed(None, d, &mut out);
            dm.push((timed(Some(&mut mixed), d, &mut out) - base) / n as f64);
            let base = timed(None, &a, &mut out);
            let mut s = replay(&a);
            let start = std::time::Instant::now();
            rt.block_on(s.dump_with(|x| floor.touch(x.msg().cookie()))).unwrap();
            df.push((start.elapsed().as_secs_f64() * 1e9 - base) / n as f64);
        }
        // Every socket changed in every dump (every 10th in the mixed one).
        let retained = |t: &Tracker, before: u64| t.stats().samples_retained - before;
        assert_eq!(retained(&changing, retained_before.0), 60 * n);
        assert_eq!(retained(&mixed, retained_before.1), 60 * n.div_ceil(10));
        // The median resists the machine's noise; the mean also counts costs that come in
        // bursts (a growing pool faults in fresh pages every few dumps; `MemoryFloor`'s
        // flows, unlike the trackers', fill their stages in step).
        let med = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        eprintln!(
            "tracker per socket (paired x60, median): steady {:.1} ns, every sample changed \
             {:.1} ns (64-sample windows) / {:.1} ns (hour windows), every 10th sample changed \
             {:.1} ns; the changed path's memory traffic alone {:.1} ns",
            med(&mut ds),
            med(&mut dc),
            med(&mut dh),
            med(&mut dm),
            med(&mut df)
        );
        eprintln!(
            "tracker per socket (paired x60, mean): steady {:.1} ns, every sample changed \
             {:.1} ns (64-sample windows) / {:.1} ns (hour windows), every 10th sample changed \
             {:.1} ns; the changed path's memory traffic alone {:.1} ns",
            mean(&ds),
            mean(&dc),
            mean(&dh),
            mean(&dm),
            mean(&df)
        );
    }

    // One flow with 10,000 changing samples, built through the tracker: 16 windows of
    // 10,000 (the first is analysed; all are gathered, timed, as the analyzer stage does).
    let mut t = Tracker::new(TrackerConfig { window_samples: 10_000, ..TrackerConfig::default() });
    let mut ended = Vec::new();
    let s0 = SockBuilder::new(7, 5000, 80);
    for i in 0..16 * 9_999 + 1u64 {
        let s = s0
            .clone()
            .rtt_us(10_000 + (i * 7919 % 5000) as u32)
            .cwnd(10 + (i % 97) as u32)
            .pacing(1_000_000 + i * 10)
            .delivery_rate(900_000 + i)
            .total_retrans((i / 50) as u32)
            .bytes_acked(i * 1448);
        let bt = batch(&[(i * 10_000_000 + (i % 3) * 1_000_000, s.build())]);
        t.begin_dump();
        t.observe(&bt.get(0).unwrap(), &mut ended);
        t.end_dump(true, 0, &mut ended);
    }
    assert_eq!(ended.len(), 16);
    let mut gathers = Vec::new();
    for e in &mut ended {
        let t = std::time::Instant::now();
        e.gather();
        gathers.push(t.elapsed());
        assert_eq!(e.flow.samples.len(), 10_000);
    }
    gathers.sort();
    if bench_mode {
        eprintln!(
            "gather of a 10k-sample window out of the tracker's blocks: best {:?}, median {:?} \
             (of 16)",
            gathers[0], gathers[8]
        );
    }
    let mut flow = ended.swap_remove(0);
    let cfg = AnalyzerConfig::default();
    // As the analyzer stage does (see `keep_heap_for_reuse`).
    cgmon_rs::analysis::keep_heap_for_reuse();
    let mut g = c.benchmark_group("analyze");
    g.bench_function("10k_samples", |bch| bch.iter(|| black_box(analyze(&mut flow, &cfg))));
    g.finish();
    if bench_mode {
        // The shared machine's noise inflates means; the best of many runs is the cost of
        // the work itself.
        let mut best = std::time::Duration::MAX;
        for _ in 0..300 {
            let t = std::time::Instant::now();
            black_box(analyze(&mut flow, &cfg));
            best = best.min(t.elapsed());
        }
        eprintln!("analyze 10k samples: best of 300 runs {best:?}");
        // A one-sample record: a connection seen only in its destroy event, the commonest
        // record on a churning host (issue 51: its cost may rise by at most 20 %).
        let mut t = Tracker::new(TrackerConfig::default());
        let mut out = Vec::new();
        let s = SockBuilder::new(9, 40000, 80)
            .state(7)
            .rtt_us(20_000)
            .min_rtt_us(19_000)
            .bytes_acked(200_001)
            .chrono_us(12_000, 0, 0)
            .options(7);
        t.destroyed(&batch(&[(1_000_000_000, s.build())]).get(0).unwrap(), &mut out);
        let mut one = out.pop().expect("a flow seen in its destroy event");
        let mut best = std::time::Duration::MAX;
        for _ in 0..3000 {
            let t = std::time::Instant::now();
            black_box(analyze(&mut one, &cfg));
            best = best.min(t.elapsed());
        }
        eprintln!("analyze one-sample record: best of 3000 runs {best:?}");
    }
    c.final_summary();

    if !bench_mode {
        return;
    }
    // Memory: heap bytes per tracked flow from the 20k fixture (one sample each).
    let before = LIVE.load(Ordering::Relaxed);
    let mut t = Tracker::new(TrackerConfig::default());
    let mut out = Vec::new();
    run_dump(&mut t, &a, &mut out);
    // `flows()` first: it gathers staged samples into `samples`, allocating.
    let samples: usize = t.flows().map(|f| f.samples.capacity() * size_of::<Retained>()).sum();
    let heap = LIVE.load(Ordering::Relaxed) - before;
    let flows = t.active();
    eprintln!(
        "memory: size_of Flow {} B, Retained {} B; tracker heap {} B for {flows} flows = {:.0} B/flow, \
         of which retained samples {:.0} B/flow, the rest {:.0} B/flow",
        size_of::<Flow>(),
        size_of::<Retained>(),
        heap,
        heap as f64 / flows as f64,
        samples as f64 / flows as f64,
        (heap as f64 - samples as f64) / flows as f64,
    );
    // One more dump in which every flow changes: each takes its stage (192 B).
    run_dump(&mut t, &b, &mut out);
    let samples: usize = t.flows().map(|f| f.samples.capacity() * size_of::<Retained>()).sum();
    let heap = LIVE.load(Ordering::Relaxed) - before;
    eprintln!(
        "memory after every flow changed once: {:.0} B/flow besides retained samples (stage \
         included)",
        (heap as f64 - samples as f64) / flows as f64,
    );
    // 40 more changed dumps, read before anything gathers them: what a retained sample costs
    // where it waits (pool blocks and their lists).
    let (heap_then, kept_then) = (heap, t.stats().samples_retained);
    for k in 0..40 {
        run_dump(&mut t, if k % 2 == 0 { &a } else { &b }, &mut out);
    }
    let grown = (LIVE.load(Ordering::Relaxed) - before - heap_then) as f64;
    let kept = (t.stats().samples_retained - kept_then) as f64;
    eprintln!("memory per retained sample while it waits in the pool: {:.1} B", grown / kept);
    drop(t);
}

/// The memory traffic of the tracker's changed path, and nothing else: in walk order, read
/// and write the first three cache lines of a 320-byte per-flow record (what `Flow` changes
/// per retained sample), stage 48 bytes in a 192-byte slot of a compact pool, and every
/// fourth time copy the slot's four samples to the next block of a pool (fetched 16 blocks
/// ahead), prefetching ahead as the tracker does. Its cost per socket is a floor for the
/// tracker's changed path on this machine, with this storage.
struct MemoryFloor {
    recs: Vec<FloorRec>,
    stages: Vec<[Retained; 4]>,
    staged: Vec<u8>,
    /// Eight blocks a flow, used in turn: as a pool that has reached its size hands them out.
    blocks: Vec<FloorBlock>,
    next_block: usize,
    i: usize,
}

#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct FloorRec([u64; 40]);

#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct FloorBlock([Retained; 4]);

impl MemoryFloor {
    fn new(n: usize) -> Self {
        Self {
            recs: vec![FloorRec([0; 40]); n],
            stages: vec![[Retained::default(); 4]; n],
            staged: vec![0; n],
            blocks: vec![FloorBlock([Retained::default(); 4]); 8 * n],
            next_block: 0,
            i: 0,
        }
    }

    fn touch(&mut self, cookie: u64) {
        let n = self.recs.len();
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            let far = self.recs.as_ptr().wrapping_add((self.i + 16) % n).cast::<i8>();
            let k = (self.i + 8) % n;
            let at = self.stages[k].as_ptr().wrapping_add(usize::from(self.staged[k]));
            // SAFETY: prefetches are hints; they never fault.
            unsafe {
                for l in 0..3 {
                    _mm_prefetch::<_MM_HINT_T0>(far.wrapping_add(64 * l));
                }
                _mm_prefetch::<_MM_HINT_T0>(at.cast::<i8>());
                _mm_prefetch::<_MM_HINT_T0>(at.cast::<i8>().wrapping_add(47));
            }
        }
        let k = self.i % n;
        for w in &mut self.recs[k].0[..23] {
            *w = w.wrapping_add(cookie);
        }
        let j = usize::from(self.staged[k]);
        self.stages[k][j] = {
            let mut r = Retained::default();
            r.ts_ns = cookie;
            r
        };
        self.staged[k] += 1;
        if j == 3 {
            self.staged[k] = 0;
            let nb = self.blocks.len();
            #[cfg(target_arch = "x86_64")]
            {
                use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
                let ahead = self.blocks.as_ptr().wrapping_add((self.next_block + 16) % nb);
                for l in 0..3 {
                    // SAFETY: prefetches are hints; they never fault.
                    unsafe { _mm_prefetch::<_MM_HINT_T0>(ahead.cast::<i8>().wrapping_add(64 * l)) };
                }
            }
            self.blocks[self.next_block].0 = self.stages[k];
            self.next_block = (self.next_block + 1) % nb;
        }
        self.i += 1;
    }
}

/// Tracks the live loopback flows over 20 dumps and reports the process RSS.
fn live_rss() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let rss_before = rss_kib();
    let count = rt.block_on(async {
        let cfg = SamplerConfig {
            states: cgmon_rs::states::StateSet::parse("established").unwrap(),
            ..SamplerConfig::default()
        };
        let mut s =
            Sampler::new(NetlinkSource::open(SocketOptions::default()).unwrap(), cfg).unwrap();
        let mut t = Tracker::new(TrackerConfig::default());
        let mut out = Vec::new();
        for _ in 0..20 {
            t.begin_dump();
            let d = s.dump_with(|x| t.observe(&x, &mut out)).await.unwrap();
            t.end_dump(d.is_complete(), d.span_ns.0, &mut out);
        }
        let n = t.active();
        eprintln!(
            "rss: {rss_before} KiB before sampling (the bench process holding 10,000 sockets), \
             {} KiB after 20 dumps tracking {n} live flows",
            rss_kib()
        );
        n
    });
    assert!(count >= 20_000);
}

//! The whole program run in-process (`app::run`) on a scripted source, with no kernel and
//! no process: records reach the writer, a stop writes partial flows when asked, a reopen
//! and reports are answered, and the exit status says whether anything was lost.

use std::sync::Arc;
use std::time::Duration;

use cgmon_rs::app::{self, Event, Sources};
use cgmon_rs::metrics::Metrics;
use cgmon_rs::sampler::fakes::ScriptSource;
use cgmon_rs::wire::build::SockBuilder;
use cgmon_rs::writer::{MemoryOut, Writer};
use serde_json::Value;

/// Runs the program with `args` on a script in which flow 1 lives in dumps 2 to 4 and flow
/// 2 from dump 3 on (the first dump is empty: flows in it were open before the start); sends `events` at 100 ms intervals, then a
/// stop, and `after` at once behind it. Returns the exit status and the records written.
async fn run(args: &[&str], events: Vec<Event>, after: Vec<Event>) -> (u8, Vec<Value>) {
    let cfg = match cgmon_rs::cli::parse(args.iter().map(|s| s.to_string())).unwrap() {
        cgmon_rs::cli::Parsed::Run(c) => c,
        cgmon_rs::cli::Parsed::Print(_) => panic!("not a run"),
    };
    let s = cfg.settings;
    let metrics = Arc::new(Metrics::new(s.task.interval));
    let out = MemoryOut::default();
    let writer =
        Writer::to_stream(s.writer.clone(), Box::new(out.clone()), metrics.clone()).unwrap();
    let script = ScriptSource::new(|dump| {
        let mut m = Vec::new();
        if (2..=4).contains(&dump) {
            m.push(SockBuilder::new(1, 5000, 80).bytes_acked(u64::from(dump) * 1000 + 1).build());
        }
        if dump >= 3 {
            m.push(SockBuilder::new(2, 5001, 80).bytes_acked(u64::from(dump) * 10 + 1).build());
        }
        m
    });
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let sources = Sources::own(script.into(), None);
    let program = tokio::spawn(app::run(s, sources, writer, rx, metrics));
    for ev in events {
        tokio::time::sleep(Duration::from_millis(100)).await;
        tx.send(ev).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    tx.send(Event::Stop("test")).await.unwrap();
    for ev in after {
        tx.send(ev).await.unwrap();
    }
    let code = program.await.unwrap();
    let text = out.contents();
    let records = serde_json::Deserializer::from_slice(&text)
        .into_iter::<Value>()
        .map(Result::unwrap)
        .collect();
    (code, records)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_reach_the_writer_and_the_stop_finishes_cleanly() {
    let (code, v) =
        run(&["-run-interval", "20ms"], vec![Event::Report, Event::Reopen], vec![]).await;
    assert_eq!(code, 0);
    // Flow 1 left the dumps (no destroy listener: it ends at once, gone); flow 2 was open
    // at the stop, so without -writer-partial it is not written.
    assert_eq!(v.len(), 1, "{v:#?}");
    assert_eq!((&v[0]["Cookie"], &v[0]["EndReason"]), (&1.into(), &"gone".into()));
    assert_eq!(v[0]["BytesAcked"], 4001);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_writes_open_flows_as_partial_when_asked() {
    let (code, v) = run(&["-run-interval", "20ms", "-writer-partial"], vec![], vec![]).await;
    assert_eq!(code, 0);
    let mut by_cookie: Vec<(u64, String, bool)> = v
        .iter()
        .map(|r| {
            let reason = r["EndReason"].as_str().unwrap().to_string();
            (r["Cookie"].as_u64().unwrap(), reason, r["PartialEnd"].as_bool().unwrap())
        })
        .collect();
    by_cookie.sort();
    assert_eq!(by_cookie, [(1, "gone".into(), false), (2, "shutdown".into(), true)], "{v:#?}");
}

/// A caller's own stop (`diagnose`: every flow it watched has ended) that comes while the
/// program already stops is not a second signal: the shutdown goes on and the run is a
/// success. It once exited 1 at once, with nothing said, when a look's time ran out as its
/// last flow ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_event_during_the_shutdown_is_not_a_second_signal() {
    let done = vec![Event::Finished("every flow ended")];
    let (code, v) = run(&["-run-interval", "20ms", "-writer-partial"], vec![], done).await;
    assert_eq!(code, 0);
    assert_eq!(v.len(), 2, "{v:#?}");
}

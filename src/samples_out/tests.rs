//! The samples file as a consumer of the writer's batches, on temporary directories.

use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::analysis::testing::batch;
use crate::writer::file::{FileConfig, Keep};
use crate::writer::{FLUSH_INTERVAL, Target, Writer, WriterConfig};

fn file_cfg(dir: &std::path::Path, name: &str) -> FileConfig {
    FileConfig { dir: dir.to_path_buf(), name: name.into(), level: 6, keep: Keep::default() }
}

/// The records of every `f*.json.gz` file in `dir`.
fn all_gz(dir: &std::path::Path) -> Vec<u64> {
    let mut all = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if name.starts_with("f.") && name.ends_with(".gz") {
            let raw = std::fs::read(&p).unwrap();
            let mut text = Vec::new();
            flate2::read::MultiGzDecoder::new(&raw[..]).read_to_end(&mut text).unwrap();
            all.extend(
                serde_json::Deserializer::from_slice(&text)
                    .into_iter::<serde_json::Value>()
                    .map(|v| v.unwrap()["Cookie"].as_u64().unwrap()),
            );
        }
    }
    all.sort_unstable();
    all
}

#[test]
fn issue_32_a_close_that_fails_on_a_full_disk_is_finished_by_a_later_one() {
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
    let dir = tempfile::tempdir().unwrap();
    let m = Arc::new(Metrics::default());
    let c = WriterConfig {
        target: Target::File(file_cfg(dir.path(), "f.json.gz")),
        pretty: false,
        rotate_size: None,
        rotate_interval: None,
        backlog_bytes: 64 << 20,
    };
    let full = Arc::new(AtomicBool::new(false));
    let mut samples = SamplesOut::open(file_cfg(dir.path(), "s.json.gz"), m.clone()).unwrap();
    samples.inject_full(&full);
    let mut w = Writer::open(c, m.clone()).unwrap().with_consumer(Box::new(samples));
    w.inject_full(&full);
    let mut b = batch(0..4);
    b.samples = b"{\"s\":1}\n".to_vec();
    w.write_batch(b).unwrap();
    full.store(true, Relaxed);
    // A rotation and a flush of the samples file while full, then the disk frees during
    // the shutdown's patience.
    w.reopen();
    w.tick(Instant::now() + FLUSH_INTERVAL).unwrap();
    let f2 = full.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        f2.store(false, Relaxed);
    });
    w.close(Duration::from_secs(5)).unwrap();
    t.join().unwrap();
    assert_eq!(all_gz(dir.path()).iter().filter(|&&c| c <= 4).count(), 4);
    assert_eq!(m.records_written.get(), 4);
    // The samples file's one line is there too, in a complete stream.
    let mut samples = 0;
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let p = e.unwrap().path();
        if p.file_name().unwrap().to_string_lossy().starts_with("s.") {
            let raw = std::fs::read(&p).unwrap();
            let mut text = String::new();
            flate2::read::MultiGzDecoder::new(&raw[..]).read_to_string(&mut text).unwrap();
            samples += text.lines().count();
        }
    }
    assert_eq!(samples, 1);
}

//! Writer tests on temporary directories and in-memory streams; no kernel needed.

use std::io::Read;
use std::sync::Mutex;

use super::*;
use crate::analysis::testing::{batch, record};
use crate::tracker::testing::ended_flow;
use crate::who::namer::RecordNamer;
use crate::who::services::Services;
use crate::wire::build::SockBuilder;

fn cfg(target: Target) -> WriterConfig {
    WriterConfig {
        target,
        pretty: false,
        rotate_size: None,
        rotate_interval: None,
        backlog_bytes: 64 << 20,
    }
}

fn file_cfg(dir: &std::path::Path, name: &str) -> FileConfig {
    FileConfig { dir: dir.to_path_buf(), name: name.into(), level: 6, keep: file::Keep::default() }
}

/// Every record in a (possibly multi-member, possibly cut) gzip file, by cookie, and
/// whether the stream was complete.
fn read_gz(path: &std::path::Path) -> (Vec<u64>, bool) {
    let raw = std::fs::read(path).unwrap();
    let mut d = flate2::read::MultiGzDecoder::new(&raw[..]);
    let mut text = Vec::new();
    let complete = d.read_to_end(&mut text).is_ok();
    let cookies = cookies(&text);
    (cookies, complete)
}

fn cookies(text: &[u8]) -> Vec<u64> {
    serde_json::Deserializer::from_slice(text)
        .into_iter::<serde_json::Value>()
        .map_while(Result::ok)
        .map(|v| v["Cookie"].as_u64().unwrap())
        .collect()
}

#[test]
fn stdout_is_one_flushed_line_per_record() {
    let out = MemoryOut::default();
    let m = Arc::new(Metrics::default());
    let mut w = Writer::to_stream(cfg(Target::Stdout), Box::new(out.clone()), m.clone()).unwrap();
    w.write_batch(batch(0..3)).unwrap();
    w.close(Duration::from_secs(10)).unwrap();
    let text = String::from_utf8(out.contents()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3);
    for (i, l) in lines.iter().enumerate() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        assert_eq!(v["Cookie"], i as u64 + 1);
        assert!(v["ID"]["SrcPort"].is_u64());
    }
    assert_eq!(m.records_written.get(), 3);
}

/// A stdout whose reader has stopped reading until the gate opens.
#[derive(Clone, Default)]
struct Stalled {
    gate: Arc<(Mutex<bool>, std::sync::Condvar)>,
    out: MemoryOut,
}

impl Write for Stalled {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        let mut open = self.gate.0.lock().unwrap();
        while !*open {
            open = self.gate.1.wait(open).unwrap();
        }
        self.out.write(b)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_stalled_stdout_reader_fills_the_backlog_not_the_channel() {
    // 3,000 single-record batches (destroy events come a flow or two at a time) against a
    // channel of 16: before stdout had its own thread, the writer blocked in write() and
    // the channel filled after 16.
    let out = Stalled::default();
    let m = Arc::new(Metrics::default());
    let w = Writer::to_stream(cfg(Target::Stdout), Box::new(out.clone()), m.clone()).unwrap();
    let (tx, rx) = std::sync::mpsc::sync_channel(16);
    let h = spawn(w, rx, ReopenRequest::default(), Duration::from_secs(10)).unwrap();
    for i in 0..3000 {
        let mut b = Some(Msg::Batch(batch(i..i + 1)));
        let t = Instant::now();
        // The writer takes each batch within moments although nothing is being read.
        while let Err(std::sync::mpsc::TrySendError::Full(back)) = tx.try_send(b.take().unwrap()) {
            assert!(t.elapsed() < Duration::from_secs(5), "channel full at batch {i}");
            b = Some(back);
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    // Give the writer a moment to take the last batches off the channel.
    let t = Instant::now();
    while m.writer_backlog.get() < 3000 && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(m.writer_backlog.get(), 3000, "every record held, none written");
    assert_eq!(m.records_written.get(), 0);
    *out.gate.0.lock().unwrap() = true;
    out.gate.1.notify_all();
    drop(tx);
    h.join().unwrap().unwrap();
    assert_eq!(m.records_written.get(), 3000);
    assert_eq!(m.records_lost.get(), 0);
    assert_eq!(cookies(&out.out.contents()), (1..=3000).collect::<Vec<u64>>());
}

#[test]
fn pretty_is_cgmons_tab_indented_stream() {
    let out = MemoryOut::default();
    let m = Arc::new(Metrics::default());
    let c = WriterConfig { pretty: true, ..cfg(Target::Stdout) };
    let mut w = Writer::to_stream(c, Box::new(out.clone()), m).unwrap();
    w.write_batch(batch(0..2)).unwrap();
    w.close(Duration::from_secs(10)).unwrap();
    let text = out.contents();
    let s = String::from_utf8(text.clone()).unwrap();
    assert!(s.starts_with("{\n\t\"ID\": {\n\t\t\"SrcIP\""), "{}", &s[..40]);
    assert_eq!(cookies(&text), [1, 2]);
}

#[test]
fn gzip_file_is_valid_and_complete_after_close() {
    let dir = tempfile::tempdir().unwrap();
    let m = Arc::new(Metrics::default());
    let mut w = Writer::open(cfg(Target::File(file_cfg(dir.path(), "f.json.gz"))), m).unwrap();
    w.write_batch(batch(0..50)).unwrap();
    w.close(Duration::ZERO).unwrap();
    let (c, complete) = read_gz(&dir.path().join("f.json.gz"));
    assert!(complete);
    assert_eq!(c, (1..=50).collect::<Vec<_>>());
}

#[test]
fn a_sync_flush_makes_every_record_readable_before_close() {
    let dir = tempfile::tempdir().unwrap();
    let m = Arc::new(Metrics::default());
    let mut w = Writer::open(cfg(Target::File(file_cfg(dir.path(), "f.json.gz"))), m).unwrap();
    w.write_batch(batch(0..5)).unwrap();
    w.tick(Instant::now() + FLUSH_INTERVAL).unwrap();
    // As after a SIGKILL: the stream has no trailer, yet every record is there.
    let (c, complete) = read_gz(&dir.path().join("f.json.gz"));
    assert!(!complete);
    assert_eq!(c, [1, 2, 3, 4, 5]);
    drop(w);
}

#[test]
fn size_rotation_keeps_every_file_valid_and_every_record_once() {
    let dir = tempfile::tempdir().unwrap();
    let m = Arc::new(Metrics::default());
    let c = WriterConfig {
        rotate_size: Some(4096),
        ..cfg(Target::File(FileConfig { level: 1, ..file_cfg(dir.path(), "f.json.gz") }))
    };
    let mut w = Writer::open(c, m.clone()).unwrap();
    for k in 0..200 {
        w.write_batch(batch(k * 50..(k + 1) * 50)).unwrap();
    }
    w.close(Duration::ZERO).unwrap();
    let rotations = m.rotations.get();
    assert!(rotations >= 2, "only {rotations} rotations");
    let mut all = Vec::new();
    for n in 1..=rotations {
        let p = dir.path().join(format!("f.{n}.json.gz"));
        let (c, complete) = read_gz(&p);
        assert!(complete, "{} is not a complete gzip file", p.display());
        assert!(std::fs::metadata(&p).unwrap().len() >= 4096);
        all.extend(c);
    }
    let (c, complete) = read_gz(&dir.path().join("f.json.gz"));
    assert!(complete);
    all.extend(c);
    assert_eq!(all, (1..=10_000).collect::<Vec<_>>());
}

#[test]
fn interval_rotation_runs_on_the_timer_and_skips_empty_files() {
    let dir = tempfile::tempdir().unwrap();
    let m = Arc::new(Metrics::default());
    let c = WriterConfig {
        rotate_interval: Some(Duration::from_secs(60)),
        ..cfg(Target::File(file_cfg(dir.path(), "f.json")))
    };
    let mut w = Writer::open(c, m.clone()).unwrap();
    let t0 = Instant::now();
    w.tick(t0 + Duration::from_secs(61)).unwrap(); // nothing written: no rotation
    assert_eq!(m.rotations.get(), 0);
    w.write_batch(batch(0..2)).unwrap();
    w.tick(t0 + Duration::from_secs(122)).unwrap(); // no new data arrived; the timer rotates
    assert_eq!(m.rotations.get(), 1);
    assert_eq!(cookies(&std::fs::read(dir.path().join("f.1.json")).unwrap()), [1, 2]);
    assert_eq!(std::fs::metadata(dir.path().join("f.json")).unwrap().len(), 0);
}

#[test]
fn rotated_names_never_overwrite() {
    assert_eq!(file::rotated_name("cgmon-vm.json.gz", 1), "cgmon-vm.1.json.gz");
    assert_eq!(file::rotated_name("flows.gz", 2), "flows.2.gz");
    assert_eq!(file::rotated_name("flows", 3), "flows.3");
    assert_eq!(file::rotated_name(".hidden", 1), ".hidden.1");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f.1.json.gz"), b"x").unwrap();
    std::fs::write(dir.path().join("f.2.json"), b"x").unwrap(); // the non-gz variant counts
    let n = file::next_rotated_name(dir.path(), "f.json.gz").unwrap();
    assert_eq!(n, dir.path().join("f.3.json.gz"));
    // Numbered after the highest, gaps and all, so a higher N is always newer; names of
    // other shapes do not count.
    std::fs::write(dir.path().join("f.7.json.gz"), b"x").unwrap();
    std::fs::write(dir.path().join("f.x9.json.gz"), b"x").unwrap();
    std::fs::write(dir.path().join("g.9.json.gz"), b"x").unwrap();
    assert_eq!(file::highest_rotated(dir.path(), "f.json.gz").unwrap(), 7);
    assert_eq!(file::highest_rotated(dir.path(), "a.0b.json").unwrap(), 0);
    // The rename never replaces what is there.
    std::fs::write(dir.path().join("live"), b"new").unwrap();
    let (from, to) = (dir.path().join("live"), dir.path().join("f.7.json.gz"));
    let e = file::rename_noreplace(&from, &to).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
    assert_eq!(std::fs::read(&to).unwrap(), b"x");
}

#[test]
fn rotation_takes_the_next_number_after_the_highest_and_files_are_0640() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f.4.json"), b"{}\n").unwrap();
    let m = Arc::new(Metrics::default());
    let mut w = Writer::open(cfg(Target::File(file_cfg(dir.path(), "f.json"))), m).unwrap();
    w.write_batch(batch(0..1)).unwrap();
    w.reopen();
    assert_eq!(cookies(&std::fs::read(dir.path().join("f.5.json")).unwrap()), [1]);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.path().join("f.json")).unwrap().permissions().mode();
    assert_eq!(mode & 0o037, 0, "no write for the group, nothing for others: {mode:o}");
    w.close(Duration::ZERO).unwrap();
}

#[test]
fn a_symlink_at_the_output_name_is_refused_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("elsewhere");
    std::os::unix::fs::symlink(&target, dir.path().join("f.json")).unwrap();
    let m = Arc::new(Metrics::default());
    let e = Writer::open(cfg(Target::File(file_cfg(dir.path(), "f.json"))), m.clone())
        .err()
        .expect("a dangling symlink is in the way")
        .to_string();
    assert!(e.contains("f.json") && e.contains("symbolic link"), "{e}");
    assert!(!target.exists(), "the symlink's target was not created");
    // Put in the way while running: the reopen at rotation is refused, records wait.
    let mut w = Writer::open(cfg(Target::File(file_cfg(dir.path(), "g.json"))), m.clone()).unwrap();
    w.write_batch(batch(0..2)).unwrap();
    std::fs::rename(dir.path().join("g.json"), dir.path().join("moved.json")).unwrap();
    std::os::unix::fs::symlink(&target, dir.path().join("g.json")).unwrap();
    w.reopen();
    w.write_batch(batch(2..3)).unwrap();
    assert!(!target.exists());
    assert_eq!((m.output_failing.get(), m.writer_backlog.get()), (1, 1));
    std::fs::remove_file(dir.path().join("g.json")).unwrap();
    w.tick(Instant::now()).unwrap();
    w.close(Duration::ZERO).unwrap();
    assert_eq!(cookies(&std::fs::read(dir.path().join("moved.json")).unwrap()), [1, 2]);
    assert_eq!(cookies(&std::fs::read(dir.path().join("g.json")).unwrap()), [3]);
    assert_eq!((m.records_written.get(), m.records_lost.get()), (3, 0));
}

#[test]
fn a_failed_rotation_is_retried_until_it_works_and_nothing_is_lost() {
    let top = tempfile::tempdir().unwrap();
    let dir = top.path().join("out");
    std::fs::create_dir(&dir).unwrap();
    let m = Arc::new(Metrics::default());
    let mut w = Writer::open(cfg(Target::File(file_cfg(&dir, "f.json.gz"))), m.clone()).unwrap();
    w.write_batch(batch(0..2)).unwrap();
    // The directory goes away; SIGHUP: the close works (its records are on disk), the
    // reopen cannot.
    std::fs::rename(&dir, top.path().join("away")).unwrap();
    w.reopen();
    assert_eq!(m.records_written.get(), 2, "synced by the close: written");
    assert_eq!(m.output_failing.get(), 1);
    w.write_batch(batch(2..5)).unwrap();
    w.tick(Instant::now()).unwrap();
    assert_eq!(m.writer_backlog.get(), 3, "records wait; none taken into a closed file");
    w.reopen(); // a second SIGHUP while it fails changes nothing
    // The directory comes back: the next tick reopens and writes the backlog.
    std::fs::create_dir(&dir).unwrap();
    w.tick(Instant::now() + FLUSH_INTERVAL).unwrap();
    assert_eq!((m.output_failing.get(), m.writer_backlog.get()), (0, 0));
    w.close(Duration::ZERO).unwrap();
    assert_eq!(read_gz(&dir.join("f.json.gz")), (vec![3, 4, 5], true));
    assert_eq!(read_gz(&top.path().join("away/f.json.gz")), (vec![1, 2], true));
    assert_eq!((m.records_written.get(), m.records_lost.get()), (5, 0));
}

#[test]
fn a_reopen_request_is_done_even_without_its_message() {
    // SIGHUP sets the request and sends Msg::Reopen only to wake the writer; when the
    // channel is full that message is lost, and the request alone must be enough.
    let dir = tempfile::tempdir().unwrap();
    let m = Arc::new(Metrics::default());
    let w = Writer::open(cfg(Target::File(file_cfg(dir.path(), "f.json"))), m.clone()).unwrap();
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let reopen = ReopenRequest::default();
    let h = spawn(w, rx, reopen.clone(), Duration::from_secs(5)).unwrap();
    tx.send(Msg::Batch(batch(0..1))).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    for _ in 0..100 {
        reopen.request(); // a storm of signals: one reopen
    }
    let t = Instant::now();
    while !dir.path().join("f.1.json").exists() && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(500));
    drop(tx);
    h.join().unwrap().unwrap();
    assert_eq!(cookies(&std::fs::read(dir.path().join("f.1.json")).unwrap()), [1]);
    assert!(!dir.path().join("f.2.json").exists(), "100 requests, one rotation");
    assert_eq!(m.rotations.get(), 1);
}

#[test]
fn an_earlier_runs_file_is_moved_aside_not_appended_to() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f.json"), b"{\"old\":1}\n").unwrap();
    let m = Arc::new(Metrics::default());
    let mut w = Writer::open(cfg(Target::File(file_cfg(dir.path(), "f.json"))), m).unwrap();
    w.write_batch(batch(0..1)).unwrap();
    w.close(Duration::ZERO).unwrap();
    assert_eq!(std::fs::read(dir.path().join("f.1.json")).unwrap(), b"{\"old\":1}\n");
    assert_eq!(cookies(&std::fs::read(dir.path().join("f.json")).unwrap()), [1]);
}

#[test]
fn sighup_rotates_and_reopens_and_follows_a_logrotate_move() {
    let dir = tempfile::tempdir().unwrap();
    let m = Arc::new(Metrics::default());
    let mut w =
        Writer::open(cfg(Target::File(file_cfg(dir.path(), "f.json.gz"))), m.clone()).unwrap();
    w.write_batch(batch(0..2)).unwrap();
    w.reopen();
    assert_eq!(read_gz(&dir.path().join("f.1.json.gz")), (vec![1, 2], true));
    // logrotate moves the file, then signals: the moved file is completed, not renamed again.
    w.write_batch(batch(2..4)).unwrap();
    std::fs::rename(dir.path().join("f.json.gz"), dir.path().join("moved.gz")).unwrap();
    w.reopen();
    assert_eq!(read_gz(&dir.path().join("moved.gz")), (vec![3, 4], true));
    assert!(!dir.path().join("f.2.json.gz").exists());
    w.write_batch(batch(4..5)).unwrap();
    w.close(Duration::ZERO).unwrap();
    assert_eq!(read_gz(&dir.path().join("f.json.gz")), (vec![5], true));
}

#[test]
fn a_full_disk_keeps_records_counts_errors_and_bounds_the_backlog() {
    let dir = tempfile::tempdir().unwrap();
    // A device like /dev/full (1, 7) fails every write with ENOSPC. (A symlink to it would
    // be refused: output files are opened without following links.)
    if let Err(e) = crate::testkit::dev_full_at(&dir.path().join("f.json")) {
        assert!(std::env::var("CI").map_or(true, |v| v != "true"), "CI=true: mknod: {e}");
        eprintln!("skipped: making a /dev/full node needs root: {e}");
        return;
    }
    let m = Arc::new(Metrics::default());
    let one = serde_json::to_vec(&record(0)).unwrap().len() as u64 + 1;
    let c = WriterConfig {
        backlog_bytes: one * 10 + one / 2, // room for 10 records
        ..cfg(Target::File(file_cfg(dir.path(), "f.json")))
    };
    let mut w = Writer::open(c, m.clone()).unwrap();
    w.write_batch(batch(0..4)).unwrap();
    w.tick(Instant::now() + FLUSH_INTERVAL).unwrap();
    assert!(m.write_errors.get() >= 1);
    assert_eq!(m.records_lost.get(), 0);
    w.write_batch(batch(4..20)).unwrap();
    // 20 records produced: the file took the first four into its pending bytes before the
    // tick's flush failed (nothing is written per record), the backlog holds the newest 10,
    // and the rest were pushed out and counted.
    assert_eq!(m.writer_backlog.get(), 10);
    let evicted = m.records_lost.get();
    assert_eq!(evicted, 20 - 10 - 4);
    match w.close(Duration::ZERO) {
        // The backlog and the records stuck in the file's unwritten bytes.
        Err(WriterError::Lost(n)) => assert_eq!(n, 14),
        other => panic!("{other:?}"),
    }
    assert_eq!(m.records_written.get(), 0, "nothing reached the disk");
    assert_eq!(m.records_lost.get(), 20, "every record is accounted for");
}

#[test]
fn a_missing_directory_fails_at_open_naming_it() {
    let m = Arc::new(Metrics::default());
    let c = cfg(Target::File(file_cfg(std::path::Path::new("/nonexistent/cgmon"), "f.json")));
    let e = Writer::open(c, m).err().unwrap().to_string();
    assert!(e.contains("/nonexistent/cgmon"), "{e}");
}

#[test]
fn a_line_is_what_serde_json_writes_for_the_record() {
    // One sample (seven equal numbers in each summary, written once and copied) and three.
    let s = SockBuilder::new(9, 5009, 80).rtt_us(23).cwnd(10).bytes_acked(102);
    let mut one = ended_flow(&[(1_000_000_000, s)]);
    let one = crate::analysis::analyze(&mut one, &crate::analysis::AnalyzerConfig::default());
    assert_eq!(one.samples, 1);
    // And one with every optional part, in text that needs escapes.
    let mut full = record(5);
    full.service = Some("a \"quoted\" \\ unit\n\u{1}".into());
    full.dest_service = Some("db".into());
    full.comm = Some("ünïcode\tcomm".into());
    full.pid = Some(4242);
    full.cgroup_id = Some(77);
    full.netns = Some(crate::record::NetnsLabel {
        inode: 4_026_531_840,
        name: "pod:\u{7f}x".into(),
        runtime: Some("containerd"),
        container: Some("0123".into()),
        pod: Some("uid".into()),
    });
    full.min_rtt_kernel_ms = Some(f64::NAN);
    for r in [one, record(4), full] {
        let want = serde_json::to_string(&r).unwrap();
        let mut line = Vec::new();
        crate::record::json::write_record(&r, &mut line);
        assert_eq!(String::from_utf8(line).unwrap(), want);
    }
}

#[test]
fn records_name_their_cgroups_service() {
    use std::os::unix::fs::MetadataExt;
    // A cgroup tree of one unit and one container.
    let tree = tempfile::tempdir().unwrap();
    let unit = tree.path().join("system.slice/nginx.service");
    let ctr = tree.path().join("system.slice/docker-0123456789abcdef.scope");
    std::fs::create_dir_all(&unit).unwrap();
    std::fs::create_dir_all(&ctr).unwrap();
    let ino = |p: &std::path::Path| std::fs::metadata(p).unwrap().ino();
    let out = MemoryOut::default();
    let m = Arc::new(Metrics::default());
    let services = Arc::new(Mutex::new(Services::with_root(Some(tree.path().to_path_buf()))));
    let dests = Arc::new(Mutex::new(crate::who::dests::Dests::fallbacks()));
    let mut w = Writer::to_stream(cfg(Target::Stdout), Box::new(out.clone()), m)
        .unwrap()
        .with_naming(Box::new(RecordNamer::new(services, dests)));
    let mut b = batch(0..4);
    b.records[0].cgroup_id = Some(ino(&unit));
    b.records[1].cgroup_id = Some(ino(&ctr));
    b.records[2].cgroup_id = Some(u64::MAX - 1); // not in the tree (gone)
    b.records[3].cgroup_id = None; // the kernel sent none
    w.write_batch(b).unwrap();
    w.close(Duration::from_secs(5)).unwrap();
    let text = out.contents();
    let recs: Vec<serde_json::Value> =
        serde_json::Deserializer::from_slice(&text).into_iter().map(Result::unwrap).collect();
    assert_eq!(recs.len(), 4);
    assert_eq!(recs[0]["Service"], "nginx.service");
    assert_eq!(recs[1]["Service"], "docker:0123456789ab");
    assert!(recs[2].get("Service").is_none(), "an unknown cgroup names no service");
    assert!(recs[3].get("Service").is_none() && recs[3].get("CgroupID").is_none());
    assert!(recs.iter().all(|r| r["DestService"].is_string()), "destinations named too");
}

/// Every record of every `f*.json.gz` file in `dir`, and whether each file is a complete
/// gzip stream (`gzip -t` where the tool is installed).
fn all_gz(dir: &std::path::Path) -> Vec<u64> {
    let mut all = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if !name.starts_with("f.") || !name.ends_with(".gz") {
            continue;
        }
        let (c, complete) = read_gz(&p);
        assert!(complete, "{} is a complete gzip stream", p.display());
        match std::process::Command::new("gzip").arg("-t").arg(&p).status() {
            Ok(st) => assert!(st.success(), "gzip -t {}", p.display()),
            // CI installs gzip: there a missing one fails rather than skips.
            Err(e) => assert!(std::env::var("CI").is_err(), "CI=true: gzip -t: {e}"),
        }
        all.extend(c);
    }
    all.sort_unstable();
    all
}

/// A writer to file `name` in a fresh directory whose disk is full while the returned flag
/// is set (it starts as `full`).
fn on_a_disk(
    name: &str,
    full: bool,
) -> (tempfile::TempDir, Arc<Metrics>, Writer, Arc<std::sync::atomic::AtomicBool>) {
    let dir = tempfile::tempdir().unwrap();
    let m = Arc::new(Metrics::default());
    let mut w = Writer::open(cfg(Target::File(file_cfg(dir.path(), name))), m.clone()).unwrap();
    let flag = Arc::new(std::sync::atomic::AtomicBool::new(full));
    w.inject_full(&flag);
    (dir, m, w, flag)
}

#[test]
fn issue_32_rotations_on_a_full_disk_never_panic_and_lose_nothing() {
    use std::sync::atomic::Ordering::Relaxed;
    let (dir, m, mut w, full) = on_a_disk("f.json.gz", false);
    w.write_batch(batch(0..3)).unwrap();
    full.store(true, Relaxed);
    // The disk is full: the SIGHUP's close produces the gzip trailer but cannot write it.
    w.reopen();
    assert!(m.write_errors.get() >= 1);
    // Before the fix, the next record or flush went into the finished encoder and flate2
    // panicked. Records arrive, flushes and more rotations come, all while full.
    w.write_batch(batch(3..6)).unwrap();
    w.tick(Instant::now() + FLUSH_INTERVAL).unwrap();
    w.reopen();
    w.write_batch(batch(6..8)).unwrap();
    w.tick(Instant::now() + FLUSH_INTERVAL * 2).unwrap();
    assert_eq!(m.records_lost.get(), 0);
    // Space returns: everything goes out, each record once, in valid gzip files.
    full.store(false, Relaxed);
    w.tick(Instant::now() + FLUSH_INTERVAL * 3).unwrap();
    w.write_batch(batch(8..10)).unwrap();
    w.close(Duration::from_secs(1)).unwrap();
    assert_eq!(all_gz(dir.path()), (1..=10).collect::<Vec<_>>());
    assert_eq!(m.records_written.get(), 10);
    assert_eq!(m.records_lost.get(), 0);
}

#[test]
fn a_plain_file_is_written_in_blocks_not_a_record_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let m = Arc::new(Metrics::default());
    let mut w = Writer::open(cfg(Target::File(file_cfg(dir.path(), "f.json"))), m.clone()).unwrap();
    let on_disk = || std::fs::metadata(dir.path().join("f.json")).unwrap().len();
    w.write_batch(batch(0..5)).unwrap();
    assert_eq!(on_disk(), 0, "five records wait for 64 KiB or the flush");
    w.tick(Instant::now() + FLUSH_INTERVAL).unwrap();
    let text = std::fs::read(dir.path().join("f.json")).unwrap();
    assert_eq!(cookies(&text), vec![1, 2, 3, 4, 5], "the flush wrote them all");
    assert_eq!(m.records_written.get(), 5);
    // Past 64 KiB they go out without a flush.
    w.write_batch(batch(5..100)).unwrap();
    assert!(on_disk() >= 64 << 10, "{}", on_disk());
    w.close(Duration::from_secs(1)).unwrap();
    let text = std::fs::read(dir.path().join("f.json")).unwrap();
    assert_eq!(cookies(&text), (1..=100).collect::<Vec<_>>());
}

#[test]
fn a_flush_that_works_again_says_so_with_nothing_queued() {
    use std::sync::atomic::Ordering::Relaxed;
    for name in ["f.json", "f.json.gz"] {
        let (_dir, m, mut w, full) = on_a_disk(name, true);
        // The file takes all three (nothing is written per record); the flush fails.
        w.write_batch(batch(0..3)).unwrap();
        assert_eq!(m.writer_backlog.get(), 0);
        let t0 = Instant::now();
        w.tick(t0 + FLUSH_INTERVAL).unwrap();
        assert_eq!(m.output_failing.get(), 1, "{name}");
        full.store(false, Relaxed);
        w.tick(t0 + FLUSH_INTERVAL * 2).unwrap();
        assert_eq!(m.output_failing.get(), 0, "{name}: the next flush worked");
        assert_eq!(m.records_written.get(), 3, "{name}");
    }
}

#[test]
fn a_record_taken_before_a_write_fails_is_written_once() {
    use std::sync::atomic::Ordering::Relaxed;
    // The disk is full from the start: records go into the file's pending bytes until 64 KiB
    // wait, and the write of those fails just after the file took the record that filled
    // them. That record must not be queued again.
    // Enough records that 64 KiB wait even compressed.
    const N: u64 = 5000;
    for name in ["f.json", "f.json.gz"] {
        let (dir, m, mut w, full) = on_a_disk(name, true);
        w.write_batch(batch(0..N)).unwrap();
        assert!(m.write_errors.get() >= 1, "{name}: the pending bytes' write failed");
        full.store(false, Relaxed);
        w.close(Duration::from_secs(1)).unwrap();
        let raw = std::fs::read(dir.path().join(name)).unwrap();
        let text = if name.ends_with(".gz") {
            let mut t = Vec::new();
            flate2::read::MultiGzDecoder::new(&raw[..]).read_to_end(&mut t).unwrap();
            t
        } else {
            raw
        };
        let mut got = cookies(&text);
        got.sort_unstable();
        assert_eq!(got, (1..=N).collect::<Vec<_>>(), "{name}: each record once");
        assert_eq!(m.records_written.get(), N);
    }
}

#[test]
fn issue_32_a_writer_that_panics_counts_its_records_lost_and_keeps_taking_batches() {
    let dir = tempfile::tempdir().unwrap();
    let m = Arc::new(Metrics::default());
    let w = Writer::open(cfg(Target::File(file_cfg(dir.path(), "f.json"))), m.clone()).unwrap();
    let boom = w.panic_next.clone();
    let (tx, rx) = std::sync::mpsc::sync_channel(4);
    let t = spawn(w, rx, ReopenRequest::default(), Duration::from_secs(1)).unwrap();
    tx.send(Msg::Batch(batch(0..3))).unwrap();
    // Wait until the first batch is flushed (written), then break the writer.
    let deadline = Instant::now() + Duration::from_secs(5);
    while m.records_written.get() < 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(m.records_written.get(), 3);
    boom.store(true, std::sync::atomic::Ordering::Relaxed);
    tx.send(Msg::Batch(batch(3..5))).unwrap();
    // The thread lives on: more batches than the channel holds are taken and counted.
    for i in 0..10 {
        tx.send(Msg::Batch(batch(10 * i + 10..10 * i + 13))).unwrap();
    }
    drop(tx);
    match t.join().unwrap() {
        Err(WriterError::Failed { lost, why }) => {
            assert_eq!(lost, 2 + 30);
            assert_eq!(why, "injected");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(m.records_lost.get(), 32);
    assert_eq!(m.writer_stopped.get(), 1);
}

#[test]
fn issue_32_prune_deletes_the_oldest_rotated_files_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Rotated files 1..=6 of 100 bytes each (some gzipped, some not, as a name change
    // leaves them), the live file, and files that only look alike.
    for (n, gz) in [(1, true), (2, false), (3, true), (4, true), (5, true), (6, true)] {
        let name = if gz { format!("f.{n}.json.gz") } else { format!("f.{n}.json") };
        std::fs::write(d.join(name), [0u8; 100]).unwrap();
    }
    for other in ["f.json.gz", "f.x.json.gz", "g.1.json.gz", "f.7.json.gz.tmp", "f..json.gz"] {
        std::fs::write(d.join(other), [0u8; 100]).unwrap();
    }
    let names = || {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    assert!(file::prune(d, "f.json.gz", file::Keep::default()).unwrap().is_empty());
    let gone = file::prune(d, "f.json.gz", file::Keep { files: 4, bytes: 0 }).unwrap();
    assert_eq!(gone.iter().map(|g| g.1).sum::<u64>(), 200);
    assert!(gone[0].0.ends_with("f.1.json.gz") && gone[1].0.ends_with("f.2.json"));
    // 350 bytes allow three files of 100.
    let gone = file::prune(d, "f.json.gz", file::Keep { files: 0, bytes: 350 }).unwrap();
    assert_eq!(gone.len(), 1);
    assert_eq!(
        names(),
        [
            "f..json.gz",
            "f.4.json.gz",
            "f.5.json.gz",
            "f.6.json.gz",
            "f.7.json.gz.tmp",
            "f.json.gz",
            "f.x.json.gz",
            "g.1.json.gz"
        ]
    );
    // Both bounds: the tighter wins.
    file::prune(d, "f.json.gz", file::Keep { files: 1, bytes: 1 << 20 }).unwrap();
    assert!(names().contains(&"f.6.json.gz".to_string()));
    assert!(!names().contains(&"f.5.json.gz".to_string()));
}

/// Names the monitor never writes are not its own: a zero-padded number, one above
/// `MAX_ROTATED` (a planted `r.4294967295.json` once left no number to rotate to and held
/// every record back), or a file another user owns; retention deletes none of them.
#[test]
fn planted_rotated_names_neither_stop_rotation_nor_are_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for n in ["f.4294967295.json", "f.0001.json", "f.1000000000.json"] {
        std::fs::write(d.join(n), b"{}\n").unwrap();
    }
    std::fs::write(d.join("f.2.json"), b"{}\n").unwrap();
    assert_eq!(file::highest_rotated(d, "f.json").unwrap(), 2);
    let m = Arc::new(Metrics::default());
    let mut w = Writer::open(cfg(Target::File(file_cfg(d, "f.json"))), m.clone()).unwrap();
    w.write_batch(batch(0..3)).unwrap();
    w.reopen();
    assert_eq!(cookies(&std::fs::read(d.join("f.3.json")).unwrap()), [1, 2, 3]);
    assert_eq!(m.rotations.get(), 1);
    let gone = file::prune(d, "f.json", file::Keep { files: 1, bytes: 0 }).unwrap();
    assert_eq!(gone.iter().map(|g| g.0.clone()).collect::<Vec<_>>(), [d.join("f.2.json")]);
    for n in ["f.4294967295.json", "f.0001.json", "f.1000000000.json", "f.3.json"] {
        assert!(d.join(n).exists(), "{n} kept");
    }
    // Another user's file of the monitor's pattern is theirs (as root, where it can chown).
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        std::fs::write(d.join("f.1.json"), b"{}\n").unwrap();
        std::os::unix::fs::chown(d.join("f.1.json"), Some(65534), None).unwrap();
        file::prune(d, "f.json", file::Keep { files: 1, bytes: 0 }).unwrap();
        assert!(d.join("f.1.json").exists(), "not ours to delete");
    }
}

/// When no rotated name can be had at all, records are not held back: they go on into the
/// live file (a plain file appended to; for gzip, a new member after the ended one).
#[test]
fn a_rotation_that_cannot_rename_writes_on_into_the_live_file() {
    for name in ["f.json", "f.json.gz"] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let top = file::rotated_name(name, file::MAX_ROTATED);
        std::fs::write(d.join(top), b"").unwrap();
        let m = Arc::new(Metrics::default());
        let mut w = Writer::open(cfg(Target::File(file_cfg(d, name))), m.clone()).unwrap();
        w.write_batch(batch(0..2)).unwrap();
        w.reopen();
        w.write_batch(batch(2..4)).unwrap();
        w.close(Duration::from_secs(1)).unwrap();
        let raw = std::fs::read(d.join(name)).unwrap();
        let text = if name.ends_with(".gz") {
            let mut t = Vec::new();
            std::io::Read::read_to_end(&mut flate2::read::MultiGzDecoder::new(&raw[..]), &mut t)
                .unwrap();
            t
        } else {
            raw
        };
        assert_eq!(cookies(&text), [1, 2, 3, 4], "{name}: every record, none held back");
    }
}

/// A consumer that remembers what it was handed: how many records it saw whole, and what
/// it kept.
struct Seen {
    keeps: crate::edges::Keeps,
    log: Arc<Mutex<Vec<String>>>,
    name: &'static str,
}

impl crate::edges::Consumer for Seen {
    fn keeps(&self) -> crate::edges::Keeps {
        self.keeps
    }
    fn take(&mut self, b: &mut crate::edges::Written<'_>) {
        let seen = b.records().len();
        let kept = if self.keeps.records { b.keep_records(0).len() } else { 0 };
        let lines = if self.keeps.lines { b.keep_lines() } else { Vec::new() };
        let cookies: Vec<u64> = lines.iter().flat_map(|l| cookies(l)).collect();
        self.log.locked().push(format!("{}: saw {seen} kept {kept} lines {cookies:?}", self.name));
    }
    fn tick(&mut self, _: Instant) {
        self.log.locked().push(format!("{}: tick", self.name));
    }
    fn close(&mut self) {
        self.log.locked().push(format!("{}: close", self.name));
    }
}

#[test]
fn every_consumer_gets_each_batch_as_written_even_while_the_disk_is_full() {
    use crate::edges::Keeps;
    let log = Arc::new(Mutex::new(Vec::new()));
    let seen = |name, records, lines| {
        Box::new(Seen { keeps: Keeps { records, lines }, log: log.clone(), name })
    };
    let (_dir, m, w, _full) = on_a_disk("f.json.gz", true);
    // Wired keepers first: the writer still calls the one that keeps nothing first, so it
    // sees the batch whole; the first keeper gets copies, the last takes the records.
    let mut w = w
        .with_consumer(seen("ring", true, false))
        .with_consumer(seen("sink", true, true))
        .with_consumer(seen("ipfix", false, false));
    w.write_batch(batch(0..3)).unwrap();
    assert_eq!(m.records_written.get(), 0, "the full disk took none yet");
    w.write_batch(Batch::default()).unwrap(); // nothing to hand over
    w.tick(Instant::now() + FLUSH_INTERVAL).unwrap();
    assert_eq!(
        log.locked().clone(),
        [
            "ipfix: saw 3 kept 0 lines []",
            "ring: saw 3 kept 3 lines []",
            "sink: saw 3 kept 3 lines [1, 2, 3]",
            "ipfix: tick",
            "ring: tick",
            "sink: tick",
        ]
    );
    assert!(m.write_errors.get() > 0, "the file failed meanwhile");
    drop(w.close(Duration::from_millis(10)));
    assert!(log.locked().ends_with(&[
        "ipfix: close".into(),
        "ring: close".into(),
        "sink: close".into()
    ]));
}

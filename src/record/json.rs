//! One-line JSON for records, written field by field ([`write_record`]): the bytes
//! serde_json writes for a record, at less than half its cost.
//!
//! Two things made serde_json slow here. It escapes every field name byte by byte, and a
//! record has ~90; and a flow of one sample has seven equal numbers in each of its
//! summaries (28 in all), where formatting a float is a third of serialising a record
//! (benches/RESULTS.md, D18). So the names are constants copied whole, and a float equal
//! to the last one is a copy of its text (`Floats`): serialising was a quarter of the whole
//! monitor under churn (D33). Its lines go to the files, stdout and
//! the sink; pretty records and the pages stay with serde_json, and the tests hold the
//! bytes equal to serde_json's.

use serde_json::ser::{CompactFormatter, Formatter};

use super::{
    Caps, CorrDetail, Correlations, Diagnosis, FlowId, FlowStats, NetnsLabel, SamplingStats,
    Signals, TimeShares,
};

/// Writes `r` as one line of compact JSON (no newline) onto `out`: the bytes
/// `serde_json::to_writer` writes for it, field by field in the struct's order, with the
/// float cache of `Floats`.
///
/// Why not serde_json itself: a record is ~90 fields, and serde_json escapes every field
/// name byte by byte and writes each piece as a call of its own; that was a quarter of the
/// whole monitor's CPU under churn (`perf` of `cargo bench --bench churn -- whole`,
/// benches/RESULTS.md D33). Here a name and its punctuation are one constant copy, and a
/// string value is copied whole once a scan finds nothing to escape. The bytes are
/// serde_json's (tested on every optional field present and absent, and on any text and
/// number). A field added to a record fails to compile in the tests until they give it a
/// value, and then fails them until it is written here.
pub fn write_record(r: &FlowStats, out: &mut Vec<u8>) {
    out.reserve(2048);
    let mut w = Json { out, floats: Floats::default() };
    w.raw(b"{\"ID\":");
    w.id(&r.id);
    w.cgmon_part(r);
    w.our_part(r);
    w.raw(b"}");
}

/// The writer of [`write_record`]: the line and the float cache.
struct Json<'a> {
    out: &'a mut Vec<u8>,
    floats: Floats,
}

impl Json<'_> {
    /// The fields from `StartTime` to `DeliveryRateSummary` (cgmon's, mostly).
    fn cgmon_part(&mut self, r: &FlowStats) {
        self.key_str(b",\"StartTime\":", &r.start_time);
        self.key_str(b",\"EndTime\":", &r.end_time);
        self.key_int(b",\"Duration\":", r.duration);
        self.key_int(b",\"Samples\":", r.samples);
        self.key_int(b",\"SamplesDeduped\":", r.samples_deduped);
        self.key_bool(b",\"Partial\":", r.partial);
        self.key_bool(b",\"Timestamps\":", r.timestamps);
        self.key_bool(b",\"SACK\":", r.sack);
        self.key_bool(b",\"ECN\":", r.ecn);
        self.key_bool(b",\"ECNSeen\":", r.ecn_seen);
        self.opt_f64(b",\"MinRTTKernelms\":", r.min_rtt_kernel_ms);
        self.opt_f64(b",\"MinRTTObservedms\":", r.min_rtt_observed_ms);
        self.opt_f64(b",\"MaxPacingRateKernelMbps\":", r.max_pacing_rate_kernel_mbps);
        self.opt_f64(b",\"MaxPacingRateObservedMbps\":", r.max_pacing_rate_observed_mbps);
        self.opt_seven(b",\"RTTSummary\":", r.rtt_summary.as_ref());
        self.opt_seven(b",\"RTTVarSummary\":", r.rttvar_summary.as_ref());
        self.key_f64(b",\"CorrRTTCwnd\":", r.corr_rtt_cwnd);
        self.key_f64(b",\"CorrRetransCwnd\":", r.corr_retrans_cwnd);
        self.key_f64(b",\"CorrPacingCwnd\":", r.corr_pacing_cwnd);
        self.key_int(b",\"TotalRetransmits\":", r.total_retransmits);
        self.key_int(b",\"BytesAcked\":", r.bytes_acked);
        self.key_f64(b",\"SendThroughputMbps\":", r.send_throughput_mbps);
        self.opt_str(b",\"ThroughputBasis\":", r.throughput_basis);
        self.key_int(b",\"Delivered\":", r.delivered);
        self.key_int(b",\"DeliveredCE\":", r.delivered_ce);
        self.key_bool(b",\"PartialStart\":", r.partial_start);
        self.key_bool(b",\"PartialEnd\":", r.partial_end);
        self.key_int(b",\"Seq\":", r.seq);
        self.key_str(b",\"EndReason\":", r.end_reason);
        self.opt_str(b",\"Close\":", r.close);
        self.opt_seven(b",\"CwndSummary\":", Some(&r.cwnd_summary));
        self.opt_seven(b",\"PacingRateSummary\":", r.pacing_rate_summary.as_ref());
        self.opt_seven(b",\"DeliveryRateSummary\":", r.delivery_rate_summary.as_ref());
    }

    /// The fields from `Correlations` to the end (ours, mostly).
    fn our_part(&mut self, r: &FlowStats) {
        if !r.correlations.none_defined() {
            self.raw(b",\"Correlations\":");
            self.correlations(&r.correlations);
        }
        self.key_f64(b",\"RecvThroughputMbps\":", r.recv_throughput_mbps);
        self.key_int(b",\"BytesSent\":", r.bytes_sent);
        self.key_int(b",\"BytesRetrans\":", r.bytes_retrans);
        self.key_int(b",\"BytesReceived\":", r.bytes_received);
        self.key_int(b",\"SegsOut\":", r.segs_out);
        self.key_int(b",\"SegsIn\":", r.segs_in);
        self.key_str(b",\"CongestionControl\":", &r.congestion_control);
        self.key_str(b",\"Family\":", r.family);
        self.key_str(b",\"FinalState\":", r.final_state);
        self.key_int(b",\"Cookie\":", r.cookie);
        self.opt_int(b",\"CgroupID\":", r.cgroup_id);
        self.opt_str(b",\"Service\":", r.service.as_deref());
        self.opt_str(b",\"DestService\":", r.dest_service.as_deref());
        self.opt_str(b",\"Comm\":", r.comm.as_deref());
        self.opt_int(b",\"Pid\":", r.pid);
        self.opt_str(b",\"NotNamed\":", r.not_named);
        if let Some(d) = &r.diagnosis {
            self.raw(b",\"Diagnosis\":");
            self.diagnosis(d);
        }
        self.raw(b",\"Sampling\":");
        self.sampling(&r.sampling);
        if let Some(n) = &r.netns {
            self.raw(b",\"Netns\":");
            self.netns(n);
        }
    }

    fn raw(&mut self, b: &[u8]) {
        self.out.extend_from_slice(b);
    }

    /// A string as serde_json writes it: copied whole when nothing in it needs escaping
    /// (the common case: names, times, addresses), else by serde_json itself.
    fn str(&mut self, s: &str) {
        if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
            self.out.push(b'"');
            self.out.extend_from_slice(s.as_bytes());
            self.out.push(b'"');
        } else {
            let _ = serde_json::to_writer(&mut *self.out, s);
        }
    }

    fn int(&mut self, v: impl itoa::Integer) {
        self.out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
    }

    /// A float as serde_json writes it: `null` when not finite. Two kinds are written
    /// without serde_json's search for the shortest digits, which costs more than the rest
    /// of a number: a whole number below 1e15 (the -3 and -1 placeholders, 0, 100 %, a
    /// window in bytes) is its integer and `.0`; and a number of at most six decimals
    /// between 0.001 and 1e9 (a time in ms from µs, a rate in Mbit/s from bytes a second)
    /// is those decimals. Either is what serde_json writes: such a decimal is the one
    /// nearest the float, and no shorter one is (floats there are far closer together than
    /// 1e-6); the tests hold it to serde_json's text.
    fn f64(&mut self, v: f64) {
        let a = v.abs();
        if a < 1e15 && (v as i64) as f64 == v && v.to_bits() != (-0.0f64).to_bits() {
            self.int(v as i64);
            self.raw(b".0");
        } else if let Some(k) = millionths(a) {
            if v < 0.0 {
                self.raw(b"-");
            }
            self.int(k / 1_000_000);
            let mut frac = *b".000000";
            let mut f = k % 1_000_000;
            for d in frac[1..].iter_mut().rev() {
                *d = b'0' + (f % 10) as u8;
                f /= 10;
            }
            let end = frac.iter().rposition(|&d| d != b'0').unwrap_or(0) + 1;
            self.raw(&frac[..end]);
        } else if v.is_finite() {
            self.floats.write(self.out, v);
        } else {
            self.out.extend_from_slice(b"null");
        }
    }

    fn key_str(&mut self, key: &[u8], s: &str) {
        self.raw(key);
        self.str(s);
    }

    fn key_int(&mut self, key: &[u8], v: impl itoa::Integer) {
        self.raw(key);
        self.int(v);
    }

    fn key_f64(&mut self, key: &[u8], v: f64) {
        self.raw(key);
        self.f64(v);
    }

    fn key_bool(&mut self, key: &[u8], v: bool) {
        self.raw(key);
        self.raw(if v { b"true" } else { b"false" });
    }

    fn opt_str(&mut self, key: &[u8], v: Option<&str>) {
        if let Some(s) = v {
            self.key_str(key, s);
        }
    }

    fn opt_int(&mut self, key: &[u8], v: Option<impl itoa::Integer>) {
        if let Some(v) = v {
            self.key_int(key, v);
        }
    }

    fn opt_f64(&mut self, key: &[u8], v: Option<f64>) {
        if let Some(v) = v {
            self.key_f64(key, v);
        }
    }

    fn opt_seven(&mut self, key: &[u8], v: Option<&[f64; 7]>) {
        if let Some(v) = v {
            self.raw(key);
            for (i, x) in v.iter().enumerate() {
                self.raw(if i == 0 { b"[" } else { b"," });
                self.f64(*x);
            }
            self.raw(b"]");
        }
    }

    fn id(&mut self, id: &FlowId) {
        let FlowId { src_ip, src_port, dst_ip, dst_port, tstamp_start_ns, addrs: _ } = id;
        self.key_str(b"{\"SrcIP\":", src_ip);
        self.key_int(b",\"SrcPort\":", *src_port);
        self.key_str(b",\"DstIP\":", dst_ip);
        self.key_int(b",\"DstPort\":", *dst_port);
        self.key_int(b",\"TstampStartNs\":", *tstamp_start_ns);
        self.raw(b"}");
    }

    fn correlations(&mut self, c: &Correlations) {
        let Correlations { rtt_cwnd, retrans_cwnd, pacing_cwnd } = c;
        self.raw(b"{\"RTTCwnd\":");
        self.corr(rtt_cwnd);
        self.raw(b",\"RetransCwnd\":");
        self.corr(retrans_cwnd);
        self.raw(b",\"PacingCwnd\":");
        self.corr(pacing_cwnd);
        self.raw(b"}");
    }

    fn corr(&mut self, c: &CorrDetail) {
        let CorrDetail { pearson, spearman, pearson_p, spearman_p, n, effective_n } = c;
        self.key_f64(b"{\"Pearson\":", *pearson);
        self.key_f64(b",\"Spearman\":", *spearman);
        self.opt_f64(b",\"PearsonP\":", *pearson_p);
        self.opt_f64(b",\"SpearmanP\":", *spearman_p);
        self.key_int(b",\"N\":", *n);
        self.key_f64(b",\"EffectiveN\":", *effective_n);
        self.raw(b"}");
    }

    fn diagnosis(&mut self, d: &Diagnosis) {
        let Diagnosis { shares, caps, signals, achieved_mbps, verdict, cause, finding } = d;
        let TimeShares { receiver_window, send_buffer, network, application, basis } = shares;
        self.key_f64(b"{\"TimeShares\":{\"ReceiverWindowPct\":", *receiver_window);
        self.key_f64(b",\"SendBufferPct\":", *send_buffer);
        self.key_f64(b",\"NetworkPct\":", *network);
        self.key_f64(b",\"ApplicationPct\":", *application);
        self.key_str(b",\"Basis\":", basis);
        self.raw(b"},\"Caps\":");
        self.caps(caps);
        self.raw(b",\"Signals\":");
        self.signals(signals);
        self.key_f64(b",\"AchievedMbps\":", *achieved_mbps);
        self.key_str(b",\"Verdict\":", verdict);
        self.opt_str(b",\"Cause\":", *cause);
        self.key_str(b",\"Finding\":", finding);
        self.raw(b"}");
    }

    fn caps(&mut self, c: &Caps) {
        let Caps {
            peer_window_bytes,
            typical_window_bytes,
            window_cap_mbps,
            send_buffer_bytes,
            send_buffer_cap_mbps,
            loss_cap_mbps,
            bdp_bytes,
            cwnd_bytes,
        } = c;
        self.key_int(b"{\"PeerWindowBytes\":", *peer_window_bytes);
        self.opt_int(b",\"TypicalWindowBytes\":", *typical_window_bytes);
        self.opt_f64(b",\"WindowCapMbps\":", *window_cap_mbps);
        self.opt_int(b",\"SendBufferBytes\":", *send_buffer_bytes);
        self.opt_f64(b",\"SendBufferCapMbps\":", *send_buffer_cap_mbps);
        self.opt_f64(b",\"LossCapMbps\":", *loss_cap_mbps);
        self.opt_f64(b",\"BDPBytes\":", *bdp_bytes);
        self.key_f64(b",\"CwndBytes\":", *cwnd_bytes);
        self.raw(b"}");
    }

    fn signals(&mut self, s: &Signals) {
        let Signals {
            loss_pct,
            window_closed_pct,
            zero_window_stalls,
            zero_window_ms,
            reordering,
            spurious,
            ce_pct,
            rtos,
            rto_time_ms,
            mss,
            window_scaling,
            syn_retransmits,
            setup_delay_ms,
        } = s;
        self.key_f64(b"{\"LossPct\":", *loss_pct);
        self.opt_f64(b",\"WindowClosedPct\":", *window_closed_pct);
        self.opt_int(b",\"ZeroWindowStalls\":", *zero_window_stalls);
        self.opt_f64(b",\"ZeroWindowms\":", *zero_window_ms);
        self.key_int(b",\"ReorderingEvents\":", *reordering);
        self.key_int(b",\"SpuriousRetransmits\":", *spurious);
        self.opt_f64(b",\"CEMarkedPct\":", *ce_pct);
        self.key_int(b",\"RTOs\":", *rtos);
        self.opt_int(b",\"RTOTimems\":", *rto_time_ms);
        self.key_int(b",\"MSS\":", *mss);
        self.key_bool(b",\"WindowScaling\":", *window_scaling);
        self.key_int(b",\"SynRetransmits\":", *syn_retransmits);
        self.opt_f64(b",\"SetupDelayms\":", *setup_delay_ms);
        self.raw(b"}");
    }

    fn sampling(&mut self, s: &SamplingStats) {
        let SamplingStats { from_dumps, from_exact, from_destroy_event, max_gap_ms } = s;
        self.key_int(b"{\"FromDumps\":", *from_dumps);
        self.key_int(b",\"FromExact\":", *from_exact);
        self.key_bool(b",\"FromDestroyEvent\":", *from_destroy_event);
        self.key_f64(b",\"MaxGapms\":", *max_gap_ms);
        self.raw(b"}");
    }

    fn netns(&mut self, n: &NetnsLabel) {
        let NetnsLabel { inode, name, runtime, container, pod } = n;
        self.key_int(b"{\"Inode\":", *inode);
        self.key_str(b",\"Name\":", name);
        self.opt_str(b",\"Runtime\":", *runtime);
        self.opt_str(b",\"Container\":", container.as_deref());
        self.opt_str(b",\"Pod\":", pod.as_deref());
        self.raw(b"}");
    }
}

/// `a` (positive) in millionths, when it is 0.001 to 1e9 and exactly the float nearest that
/// many millionths, so that its six decimals are its text.
fn millionths(a: f64) -> Option<u64> {
    let k = (a * 1e6) as u64;
    ((1e-3..1e9).contains(&a) && k as f64 == a * 1e6 && k as f64 / 1e6 == a).then_some(k)
}

/// The last float written and its text (serde_json's): a flow of one sample writes each
/// summary's number seven times.
#[derive(Debug, Default)]
struct Floats {
    /// The last float's bits and text (`len` 0: none yet).
    last: u64,
    text: [u8; 32],
    len: usize,
}

impl Floats {
    /// Writes the finite `v` as serde_json does, copying the text when it is the last one.
    fn write(&mut self, out: &mut Vec<u8>, v: f64) {
        if self.len == 0 || v.to_bits() != self.last {
            // A float's shortest text is at most 24 bytes; a longer one fails here, and is
            // then written as it comes, uncached. (Into a `Vec`, writing cannot fail.)
            let cap = self.text.len();
            let mut rest = &mut self.text[..];
            if CompactFormatter.write_f64(&mut rest, v).is_err() {
                self.len = 0;
                let _ = CompactFormatter.write_f64(out, v);
                return;
            }
            self.len = cap - rest.len();
            self.last = v.to_bits();
        }
        out.extend_from_slice(&self.text[..self.len]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::text_in;
    use proptest::prelude::*;

    fn serde_json_of(r: &FlowStats) -> String {
        serde_json::to_string(r).unwrap()
    }

    fn ours(r: &FlowStats) -> String {
        let mut line = Vec::new();
        write_record(r, &mut line);
        String::from_utf8(line).unwrap()
    }

    /// A record with every part present and a value of its own in every field. A field
    /// added to a record does not compile here until it is given one; give an optional
    /// one `Some`, and draw it in `fill`, so that the tests see it written.
    fn base() -> FlowStats {
        let corr = |k: f64| CorrDetail {
            pearson: 0.5 + k,
            spearman: 0.25 + k,
            pearson_p: Some(0.125 + k),
            spearman_p: Some(0.0625 + k),
            n: 3,
            effective_n: 2.5 + k,
        };
        FlowStats {
            id: FlowId {
                src_ip: text_in("10.0.0.1"),
                src_port: 40_001,
                dst_ip: text_in("fd00::2"),
                dst_port: 443,
                tstamp_start_ns: 1_000_000_001,
                addrs: None,
            },
            start_time: text_in("2026-11-28T13:00:00.000000001Z"),
            end_time: text_in("2026-11-28T13:00:03.000000002Z"),
            duration: 2_000_000_003,
            samples: 4,
            samples_deduped: 5,
            partial: true,
            timestamps: true,
            sack: false,
            ecn: true,
            ecn_seen: false,
            min_rtt_kernel_ms: Some(0.011),
            min_rtt_observed_ms: Some(0.012),
            max_pacing_rate_kernel_mbps: Some(13.0),
            max_pacing_rate_observed_mbps: Some(14.5),
            rtt_summary: Some([0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07]),
            rttvar_summary: Some([1.0, 1.0, 1.5, 2.0, 2.0, 2.5, 3.0]),
            corr_rtt_cwnd: 0.5,
            corr_retrans_cwnd: -2.0,
            corr_pacing_cwnd: -3.0,
            total_retransmits: 6,
            bytes_acked: 7_000,
            send_throughput_mbps: 8.5,
            throughput_basis: Some("busy-time"),
            delivered: 9,
            delivered_ce: 10,
            partial_start: true,
            partial_end: false,
            seq: 11,
            end_reason: "destroyed",
            close: Some("clean"),
            cwnd_summary: [14_480.0; 7],
            pacing_rate_summary: Some([20.0, 21.0, 22.0, 23.0, 24.0, 25.0, 26.0]),
            delivery_rate_summary: Some([30.5; 7]),
            correlations: Correlations {
                rtt_cwnd: corr(0.0),
                retrans_cwnd: corr(0.1),
                pacing_cwnd: corr(0.2),
            },
            recv_throughput_mbps: 12.25,
            bytes_sent: 13_000,
            bytes_retrans: 14,
            bytes_received: 15_000,
            segs_out: 16,
            segs_in: 17,
            accepted: true,
            congestion_control: text_in("cubic"),
            family: "inet6",
            final_state: "CLOSE",
            cookie: 18,
            cgroup_id: Some(19),
            service: Some("nginx.service".into()),
            dest_service: Some("db".into()),
            comm: Some("curl".into()),
            pid: Some(20),
            not_named: Some("connecting side"),
            diagnosis: Some(Diagnosis {
                shares: TimeShares {
                    receiver_window: 10.0,
                    send_buffer: 20.0,
                    network: 30.0,
                    application: 40.0,
                    basis: "span",
                },
                caps: Caps {
                    peer_window_bytes: 65_535,
                    typical_window_bytes: Some(32_768),
                    window_cap_mbps: Some(21.5),
                    send_buffer_bytes: Some(87_380),
                    send_buffer_cap_mbps: Some(22.5),
                    loss_cap_mbps: Some(23.5),
                    bdp_bytes: Some(24.5),
                    cwnd_bytes: 25.5,
                },
                signals: Signals {
                    loss_pct: 0.5,
                    window_closed_pct: Some(1.5),
                    zero_window_stalls: Some(2),
                    zero_window_ms: Some(3.5),
                    reordering: 4,
                    spurious: 5,
                    ce_pct: Some(6.5),
                    rtos: 7,
                    rto_time_ms: Some(8),
                    mss: 1448,
                    window_scaling: true,
                    syn_retransmits: 9,
                    setup_delay_ms: Some(1_000.5),
                },
                achieved_mbps: 8.5,
                verdict: "network",
                cause: Some("loss"),
                finding: "network-limited: 8.5 Mbit/s".into(),
            }),
            sampling: SamplingStats {
                from_dumps: 2,
                from_exact: 1,
                from_destroy_event: true,
                max_gap_ms: 100.5,
            },
            netns: Some(NetnsLabel {
                inode: 4_026_531_840,
                name: "pod:abc".into(),
                runtime: Some("containerd"),
                container: Some("0123".into()),
                pod: Some("uid".into()),
            }),
        }
    }

    /// Floats of every kind: whole numbers on both sides of where serde_json turns to
    /// exponents, the signed zero, the placeholders, tiny, huge and not finite.
    fn float() -> impl Strategy<Value = f64> {
        prop_oneof![
            any::<f64>(),
            (-2e16..2e16f64).prop_map(f64::trunc),
            (-1e6..1e6f64),
            // Decimals of one to seven places, from 1e-5 to past 1e9.
            (any::<i64>(), 1..=7i32)
                .prop_map(|(k, d)| (k % 2_000_000_000_000_000) as f64 / 10f64.powi(d)),
            (-20_000_000i64..20_000_000, 1..=7i32).prop_map(|(k, d)| k as f64 / 10f64.powi(d)),
            prop::sample::select(vec![
                0.0,
                -0.0,
                -1.0,
                -3.0,
                100.0,
                1e15 - 1.0,
                1e15,
                0.001,
                0.000999,
                0.0001,
                1e9,
                999_999_999.999999,
                1_248_614.370224,
                1e16,
                -1e15 + 1.0,
                9_007_199_254_740_993.0,
                f64::NAN,
                f64::INFINITY,
                f64::NEG_INFINITY,
                f64::MIN_POSITIVE,
                5e-324,
            ]),
        ]
    }

    /// Every field of `r` set from the values drawn: each option present or absent, each
    /// float and integer any value, each text any text.
    fn fill(r: &mut FlowStats, f: &[f64], on: &[bool], n: &[u64], t: &[String]) {
        let mut f = f.iter().copied();
        let mut on = on.iter().copied();
        let mut n = n.iter().copied();
        let mut t = t.iter().cloned();
        let mut fl = || f.next().unwrap();
        let mut opt = || on.next().unwrap();
        let mut int = || n.next().unwrap();
        let mut text = || t.next().unwrap();
        let seven = |fl: &mut dyn FnMut() -> f64| std::array::from_fn(|_| fl());
        r.id.src_ip = text_in(&text());
        r.id.src_port = int() as u16;
        r.id.tstamp_start_ns = int();
        r.start_time = text_in(&text());
        r.duration = int() as i64;
        r.samples = int() as usize;
        r.partial = opt();
        r.min_rtt_kernel_ms = opt().then(&mut fl);
        r.min_rtt_observed_ms = opt().then(&mut fl);
        r.max_pacing_rate_kernel_mbps = opt().then(&mut fl);
        r.max_pacing_rate_observed_mbps = opt().then(&mut fl);
        r.rtt_summary = opt().then(|| seven(&mut fl));
        r.rttvar_summary = opt().then(|| seven(&mut fl));
        r.corr_rtt_cwnd = fl();
        r.bytes_acked = int();
        r.send_throughput_mbps = fl();
        r.throughput_basis = opt().then_some("busy-time");
        r.close = opt().then_some("reset");
        r.cwnd_summary = seven(&mut fl);
        r.pacing_rate_summary = opt().then(|| seven(&mut fl));
        r.delivery_rate_summary = opt().then(|| seven(&mut fl));
        if opt() {
            r.correlations.rtt_cwnd.n = 1;
            r.correlations.retrans_cwnd.n = 0;
            r.correlations.pacing_cwnd.n = 1;
        } else {
            let c = &mut r.correlations.retrans_cwnd;
            (c.n, c.pearson, c.spearman, c.effective_n) = (int() as usize, fl(), fl(), fl());
            (c.pearson_p, c.spearman_p) = (opt().then(&mut fl), opt().then(&mut fl));
        }
        r.congestion_control = text_in(&text());
        r.cgroup_id = opt().then(&mut int);
        r.service = opt().then(&mut text);
        r.dest_service = opt().then(&mut text);
        r.comm = opt().then(|| text().into());
        r.pid = opt().then(|| int() as u32);
        r.not_named = opt().then_some(crate::record::NOT_NAMED_CONNECTING);
        r.sampling.max_gap_ms = fl();
        r.sampling.from_destroy_event = opt();
        r.netns = opt().then(|| NetnsLabel {
            inode: int(),
            name: text(),
            runtime: opt().then_some("containerd"),
            container: opt().then(&mut text),
            pod: opt().then(&mut text),
        });
        if opt() {
            r.diagnosis = None;
        } else if let Some(d) = &mut r.diagnosis {
            d.shares.network = fl();
            d.achieved_mbps = fl();
            d.cause = opt().then_some("rwnd-small");
            d.finding = text();
            let c = &mut d.caps;
            c.typical_window_bytes = opt().then(|| int() as u32);
            c.window_cap_mbps = opt().then(&mut fl);
            c.send_buffer_bytes = opt().then(|| int() as u32);
            c.send_buffer_cap_mbps = opt().then(&mut fl);
            c.loss_cap_mbps = opt().then(&mut fl);
            c.bdp_bytes = opt().then(&mut fl);
            c.cwnd_bytes = fl();
            let s = &mut d.signals;
            s.loss_pct = fl();
            s.window_closed_pct = opt().then(&mut fl);
            s.zero_window_stalls = opt().then(|| int() as u32);
            s.zero_window_ms = opt().then(&mut fl);
            s.ce_pct = opt().then(&mut fl);
            s.rto_time_ms = opt().then(|| int() as u32);
            s.setup_delay_ms = opt().then(&mut fl);
        }
    }

    proptest! {
        #[test]
        fn any_record_as_serde_json_writes_it(
            f in prop::collection::vec(float(), 80),
            on in prop::collection::vec(any::<bool>(), 40),
            n in prop::collection::vec(any::<u64>(), 20),
            t in prop::collection::vec(".*", 12),
        ) {
            let mut r = base();
            fill(&mut r, &f, &on, &n, &t);
            prop_assert_eq!(ours(&r), serde_json_of(&r));
        }
    }

    #[test]
    fn every_optional_part_present_and_absent_as_serde_json_writes_it() {
        // Distinct values, so that one field written in another's place shows.
        let f: Vec<f64> = (0..80).map(|i| f64::from(i) + 0.25).collect();
        let n: Vec<u64> = (0..20).collect();
        let t: Vec<String> =
            (0..12).map(|i| format!("a \"quoted\" \\ {i}\n\u{1}ü\u{7f}")).collect();
        assert_eq!(ours(&base()), serde_json_of(&base()));
        for on in [true, false] {
            let mut r = base();
            fill(&mut r, &f, &[on; 40], &n, &t);
            assert_eq!(ours(&r), serde_json_of(&r), "every option {on}");
        }
    }

    #[test]
    fn floats_repeated_and_alternating_as_serde_json_writes_them() {
        let floats = [
            0.0,
            -0.0,
            1.0,
            0.1,
            0.023,
            287_904.345936,
            1e300,
            -1e-300,
            f64::MIN_POSITIVE,
            f64::MAX,
            5e-324,
            123_456_789.0,
            1e15,
            999_999_999_999_999.0,
            f64::NAN,
            f64::INFINITY,
            -3.0,
        ];
        for &a in &floats {
            for &b in &floats {
                let mut out = Vec::new();
                let mut w = Json { out: &mut out, floats: Floats::default() };
                for x in [a, a, b, b, a] {
                    w.raw(b",");
                    w.f64(x);
                }
                let want: String =
                    [a, a, b, b, a].iter().map(|x| format!(",{}", serde_json::json!(x))).collect();
                assert_eq!(String::from_utf8(out).unwrap(), want, "{a} {b}");
            }
        }
    }
}

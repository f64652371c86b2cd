//! No input makes the decoder panic, read out of bounds or loop: proptest over arbitrary
//! bytes and over captured datagrams with bytes flipped, cut and spliced. Each case runs the
//! full path the sampler runs (frame, index, read every accessor) and the JSON encoder.
//!
//! Inputs run per `cargo test`: 20,000 arbitrary + 40,000 mutated = 60,000 datagrams. For a
//! long run: `PROPTEST_CASES=1000000 cargo test --release --test it robustness`.

use cgmon_rs::wire::attr::{self, AttrIter};
use cgmon_rs::wire::nlmsg::NlMsgIter;
use cgmon_rs::wire::sock::{LayoutCache, Sample, SockIndex, index};
use proptest::prelude::*;

use crate::fixture;

/// Decodes everything reachable from a datagram, touching every accessor.
fn exercise(dg: &[u8]) -> usize {
    let mut touched = 0;
    // The sampler's layout cache must index every message exactly as a fresh walk does.
    let mut layout = LayoutCache::default();
    for m in NlMsgIter::new(dg) {
        let Ok(m) = m else { break };
        let _ = m.error_code();
        let mut cached = SockIndex::default();
        let via_cache = layout.index_into(m.payload, &mut cached).map(|()| cached);
        assert_eq!(via_cache.ok(), index(m.payload).ok(), "layout cache and walk disagree");
        // index() is AttrIter's walk written flat for speed: both must judge alike.
        if m.payload.len() >= 72 && m.payload.len() <= usize::from(u16::MAX) {
            let walk: Result<Vec<_>, _> = AttrIter::new(m.payload, 72).collect();
            assert_eq!(walk.is_ok(), index(m.payload).is_ok(), "index and AttrIter disagree");
            if let (Ok(attrs), Ok(idx)) = (&walk, index(m.payload)) {
                let s = Sample::new(0, m.payload, &idx);
                let info = attrs.iter().rev().find(|a| a.kind == attr::INET_DIAG_INFO);
                assert_eq!(s.tcp_info().map(|t| t.as_bytes()), info.map(|a| a.value));
            }
        }
        let Ok(idx) = index(m.payload) else { continue };
        let s = Sample::new(0, m.payload, &idx);
        let msg = s.msg();
        touched +=
            usize::from(msg.state()) + usize::from(msg.sport()) + msg.src().to_string().len();
        if let Some(t) = s.tcp_info() {
            touched += t.fields().count();
            let _ = t.snd_cwnd_bytes();
        }
        let _ = (s.cong(), s.cgroup_id(), s.tos(), s.tclass(), s.shutdown(), s.mark());
        let _ = (s.sockopt(), s.protocol(), s.key());
        if let Some(mem) = s.skmem() {
            let _ = (mem.rmem_alloc(), mem.drops());
        }
        match s.cc_info() {
            Some(cgmon_rs::wire::cc::CcInfo::Bbr(b)) => touched += b.bw().is_some() as usize,
            Some(cgmon_rs::wire::cc::CcInfo::Dctcp(d)) => touched += d.alpha().is_some() as usize,
            Some(cgmon_rs::wire::cc::CcInfo::Vegas(v)) => touched += v.rtt().is_some() as usize,
            None => {}
        }
        touched += serde_json::to_string(&s).expect("serialisable").len();
    }
    touched
}

fn seeds() -> Vec<Vec<u8>> {
    ["inet.bin", "inet6.bin", "single_walk.bin", "destroy.bin"]
        .iter()
        .flat_map(|f| fixture(f))
        .map(|d| d.bytes)
        .collect()
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip { at: usize, xor: u8 },
    Cut { at: usize },
    Set16 { at: usize, value: u16 },
    Splice { at: usize, from: usize, len: usize },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(at, xor)| Mutation::Flip { at, xor }),
        any::<usize>().prop_map(|at| Mutation::Cut { at }),
        // Length fields are where decoders die: write small and huge 16-bit values.
        (any::<usize>(), prop_oneof![0u16..16, Just(u16::MAX), any::<u16>()])
            .prop_map(|(at, value)| Mutation::Set16 { at, value }),
        (any::<usize>(), any::<usize>(), 0usize..64).prop_map(|(at, from, len)| Mutation::Splice {
            at,
            from,
            len
        }),
    ]
}

fn apply(mut b: Vec<u8>, muts: &[Mutation]) -> Vec<u8> {
    for m in muts {
        if b.is_empty() {
            break;
        }
        let n = b.len();
        match *m {
            Mutation::Flip { at, xor } => b[at % n] ^= xor,
            Mutation::Cut { at } => b.truncate(at % n),
            Mutation::Set16 { at, value } => {
                let at = at % n;
                if at + 2 <= n {
                    b[at..at + 2].copy_from_slice(&value.to_ne_bytes());
                }
            }
            Mutation::Splice { at, from, len } => {
                let from = from % n;
                let piece: Vec<u8> = b[from..(from + len).min(n)].to_vec();
                let at = at % n;
                b.splice(at..at, piece);
            }
        }
    }
    b
}

/// Cases per property: `default`, or PROPTEST_CASES when set (for long fuzzing runs).
fn cases(default: u32) -> ProptestConfig {
    let n = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    ProptestConfig::with_cases(n)
}

proptest! {
    #![proptest_config(cases(20_000))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        exercise(&bytes);
    }
}

proptest! {
    #![proptest_config(cases(40_000))]

    #[test]
    fn mutated_captures_never_panic(
        pick in any::<prop::sample::Index>(),
        muts in prop::collection::vec(mutation(), 1..6),
    ) {
        thread_local!(static SEEDS: Vec<Vec<u8>> = seeds());
        let input = SEEDS.with(|s| apply(pick.get(s).clone(), &muts));
        exercise(&input);
    }
}

#[test]
fn unmutated_seeds_decode_fully() {
    let total: usize = seeds().iter().map(|d| exercise(d)).sum();
    assert!(total > 10_000, "seeds exercise real content ({total})");
}

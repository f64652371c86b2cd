//! The encoder against flate2's decoder (miniz_oxide's inflate), the oracle: every stream
//! it makes must decode to exactly its input, and as a gzip member with a right trailer.

use std::io::Read;

use proptest::prelude::*;

use super::*;

/// Records shaped like the writer's: the same fields in the same order, values that vary.
fn records(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let rtt = 0.02 + (i % 7) as f64 * 0.003;
            format!(
                "{{\"ID\":{{\"SrcIP\":\"127.0.0.1\",\"SrcPort\":{},\"DstIP\":\"127.0.0.1\",\
                 \"DstPort\":5555}},\"StartTime\":\"2026-11-26T20:09:{:02}.{:09}Z\",\
                 \"Samples\":1,\"RTTSummary\":[{rtt},{rtt},{rtt},{rtt},{rtt},{rtt},{rtt}],\
                 \"CorrRTTCwnd\":-3.0,\"BytesAcked\":{},\"Cookie\":{},\"Close\":\"clean\"}}\n",
                30000 + i,
                i % 60,
                (i * 7919) % 1_000_000_000,
                100 + i % 3,
                33_000_000 + i * 2,
            )
            .into_bytes()
        })
        .collect()
}

/// Decodes one gzip member, checking its CRC and size (flate2 does).
fn gunzip(z: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(z).read_to_end(&mut out).expect("a valid gzip stream");
    out
}

/// Writes `chunks` through a fast stream, with a sync flush after each chunk whose index is
/// in `flush_at`, and checks what each flush makes readable.
fn through(chunks: &[Vec<u8>], flush_at: &[usize]) -> Vec<u8> {
    let mut g = Gzip::new(Vec::new(), FAST_LEVEL);
    assert!(matches!(g, Gzip::Fast(_)));
    let mut sent = Vec::new();
    for (i, c) in chunks.iter().enumerate() {
        g.write_all(c).unwrap();
        sent.extend_from_slice(c);
        if flush_at.contains(&i) {
            g.flush().unwrap();
            // A flushed prefix decodes to everything written so far (no trailer yet).
            let mut part = Vec::new();
            let mut d = flate2::read::DeflateDecoder::new(&g.out_mut()[10..]);
            let _ = d.read_to_end(&mut part);
            assert_eq!(part, sent, "after a sync flush at chunk {i}");
        }
    }
    let z = g.finish().unwrap();
    assert_eq!(gunzip(&z), sent);
    z
}

#[test]
fn records_round_trip_and_compress_like_level_3() {
    let recs = records(4000);
    let z = through(&recs, &[10, 999, 2000]);
    let raw: usize = recs.iter().map(Vec::len).sum();
    let mut l3 = GzEncoder::new(Vec::new(), Compression::new(3));
    for r in &recs {
        l3.write_all(r).unwrap();
    }
    let l3 = l3.finish().unwrap().len();
    // Past the window and the cut-back (KEEP_MAX) several times.
    assert!(raw > 4 * KEEP_MAX, "{raw}");
    assert!(z.len() * 10 < raw, "{} of {raw}: at least 10:1", z.len());
    assert!(z.len() < 3 * l3, "{} against level 3's {l3}", z.len());
}

#[test]
fn an_empty_stream_and_flushes_of_nothing_are_valid_gzip() {
    assert_eq!(gunzip(&Gzip::new(Vec::new(), FAST_LEVEL).finish().unwrap()), b"");
    let mut g = Gzip::new(Vec::new(), FAST_LEVEL);
    g.flush().unwrap();
    g.flush().unwrap();
    g.write_all(b"x").unwrap();
    g.flush().unwrap();
    assert_eq!(gunzip(&g.finish().unwrap()), b"x");
}

#[test]
fn other_levels_are_flate2s() {
    for level in 2..=9 {
        let mut g = Gzip::new(Vec::new(), level);
        assert!(matches!(g, Gzip::Flate(_)), "level {level}");
        g.write_all(b"{\"a\":1}\n").unwrap();
        assert_eq!(gunzip(&g.finish().unwrap()), b"{\"a\":1}\n");
    }
}

#[test]
fn long_runs_and_dense_anchors() {
    // Matches longer than 258 (cut into pieces, one of 259–260 split 255 + rest), overlapping
    // matches (distance 1), and an anchor at every byte.
    for n in [0, 1, 7, 8, 9, 258, 259, 260, 261, 516, 517, 100_000] {
        let commas = vec![b','; n];
        assert_eq!(gunzip(&through(std::slice::from_ref(&commas), &[])), commas, "{n} commas");
        let mut pattern = b"{\"k\":1},".repeat(n / 8 + 1);
        pattern.truncate(n);
        assert_eq!(gunzip(&through(&[pattern.clone(), pattern.clone()], &[0])).len(), 2 * n);
    }
}

#[test]
fn code_lengths_stay_within_the_limit_and_fill_the_code() {
    // Fibonacci frequencies make the deepest Huffman trees.
    let mut fib = vec![1u32, 1];
    while fib.len() < 30 {
        let k = fib.len();
        fib.push(fib[k - 1] + fib[k - 2]);
    }
    for limit in [7u8, 15] {
        let lens = code_lengths(&fib, limit);
        assert!(lens.iter().all(|&l| (1..=limit).contains(&l)), "{lens:?}");
        let kraft: f64 = lens.iter().map(|&l| 0.5f64.powi(i32::from(l))).sum();
        assert!((kraft - 1.0).abs() < 1e-12, "a complete code: {kraft}");
        // More frequent symbols never get longer codes.
        assert!(lens.windows(2).all(|w| w[0] >= w[1]), "{lens:?}");
    }
}

proptest! {
    /// Any frequencies (up to the literal/length alphabet's 286 symbols, zeros included, and
    /// counts up to a whole stream's): every used symbol gets a code within the limit,
    /// unused ones none, the code is complete (or, with one symbol, that symbol's single
    /// bit), and a more frequent symbol never gets a longer code.
    #[test]
    fn any_frequencies_give_a_complete_prefix_code_within_the_limit(
        freq in proptest::collection::vec(prop_oneof![Just(0u32), 1u32..10, 1u32..4_000_000], 0..286),
        limit in prop_oneof![Just(7u8), Just(15u8)],
    ) {
        // A limit of 7 holds at most 128 symbols: the code-length alphabet has 19.
        let freq: Vec<u32> = if limit == 7 { freq.into_iter().take(19).collect() } else { freq };
        let lens = code_lengths(&freq, limit);
        prop_assert_eq!(lens.len(), freq.len());
        let used = freq.iter().filter(|&&f| f > 0).count();
        for (f, l) in freq.iter().zip(&lens) {
            prop_assert_eq!(*f == 0, *l == 0, "{:?} -> {:?}", &freq, &lens);
            prop_assert!(*l <= limit);
        }
        let kraft: f64 = lens.iter().filter(|&&l| l > 0).map(|&l| 0.5f64.powi(i32::from(l))).sum();
        match used {
            0 => prop_assert_eq!(kraft, 0.0),
            1 => prop_assert_eq!(kraft, 0.5),
            _ => prop_assert!((kraft - 1.0).abs() < 1e-12, "incomplete: {}", kraft),
        }
        for i in 0..freq.len() {
            for j in 0..freq.len() {
                if freq[i] > freq[j] && freq[j] > 0 {
                    prop_assert!(lens[i] <= lens[j], "{:?} -> {:?}", &freq, &lens);
                }
            }
        }
    }
}

#[test]
fn the_code_tables_agree_with_the_bases() {
    for len in 3..=258 {
        let i = len_index(len);
        let top = usize::from(LEN_BASE[i]) + (1 << LEN_EXTRA[i]) - 1;
        assert!(usize::from(LEN_BASE[i]) <= len && (len <= top || len == 258), "{len}");
        assert!(len != 258 || i == 28, "258 has its own symbol");
    }
    for d in 1..=WINDOW {
        let c = dist_code(d);
        let top = usize::from(DIST_BASE[c]) + (1 << DIST_EXTRA[c]) - 1;
        assert!(usize::from(DIST_BASE[c]) <= d && d <= top, "{d}");
    }
}

fn chunks_of(data: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut cuts: Vec<usize> = cuts.iter().map(|&c| c % (data.len() + 1)).collect();
    cuts.sort_unstable();
    let mut out = Vec::new();
    let mut at = 0;
    for c in cuts.into_iter().chain([data.len()]) {
        out.push(data[at..c].to_vec());
        at = c;
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any bytes, cut anywhere, flushed anywhere, come back whole.
    #[test]
    fn any_bytes_round_trip(
        data in proptest::collection::vec(
            prop_oneof![Just(b','), Just(b'"'), Just(b'0'), any::<u8>()], 0..20_000),
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
        flushes in proptest::collection::vec(0usize..9, 0..4),
    ) {
        let chunks = chunks_of(&data, &cuts);
        prop_assert_eq!(gunzip(&through(&chunks, &flushes)), data);
    }

    /// Records with a random alphabet of values: many matches of every length and distance.
    #[test]
    fn repetitive_text_round_trips(
        words in proptest::collection::vec("[a-c,]{1,40}", 1..400),
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
    ) {
        let data: Vec<u8> = words.concat().into_bytes();
        let chunks = chunks_of(&data, &cuts);
        prop_assert_eq!(gunzip(&through(&chunks, &[1, 3])), data);
    }
}

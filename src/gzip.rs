//! The gzip files' default compressor: a deflate encoder (RFC 1951, in gzip's RFC 1952
//! wrapping) made for a stream of JSON records, and flate2 for every other level.
//!
//! Why our own: miniz_oxide and zlib-rs are general-purpose. They look for a match at every
//! byte, which on records of short connections costs twice ours at level 1 and five times
//! at level 3, more than everything else the monitor spends on a connection
//! (benches/RESULTS.md, D25). Consecutive records share nearly all their text: the
//! same field names in the same order, and mostly the same values. So a match can only
//! start at a field boundary (a comma), and found there it runs on to the next value that
//! differs. Looking only at commas (a record has ~100) finds most matches for a fraction of
//! the cost. Measured on 20,000 records of short connections (1,805 B each): 1.05 µs and
//! 68 B a record, against level 3's 5.3 µs and 45 B (docs/records.md, "Compression").
//! zlib-rs's level 1 comes close on the stream alone (1.06–1.15× our CPU) but writes 10.8 %
//! more bytes, past the 10 % at which a crate would replace this file, and in the writer it
//! cost the whole process 15–19 % more a connection (benches/RESULTS.md, "Deflate at
//! level 1").
//!
//! The stream is standard gzip: `zcat`, `gzip -t` and every reader take it. The encoder's
//! tests check it against flate2's decoder on records, on random bytes and across flushes.

use std::io::{self, Write};

use flate2::Compression;
use flate2::write::GzEncoder;

/// The level that selects [`FastGzip`]; the others go to flate2.
pub const FAST_LEVEL: u32 = 1;

/// A gzip stream into memory: ours at [`FAST_LEVEL`], flate2's at the others.
pub enum Gzip {
    /// Ours.
    Fast(Box<FastGzip>),
    /// flate2 (miniz_oxide) at that level.
    Flate(GzEncoder<Vec<u8>>),
}

impl Gzip {
    /// A stream at `level` (1–9) writing into `out`.
    pub fn new(out: Vec<u8>, level: u32) -> Self {
        if level == FAST_LEVEL {
            Self::Fast(Box::new(FastGzip::new(out)))
        } else {
            Self::Flate(GzEncoder::new(out, Compression::new(level)))
        }
    }

    /// Compresses `data`.
    ///
    /// # Errors
    /// Only flate2's, which into memory does not fail.
    pub fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        match self {
            Self::Fast(g) => {
                g.write(data);
                Ok(())
            }
            Self::Flate(g) => g.write_all(data),
        }
    }

    /// The compressed bytes produced so far (taken out by the caller).
    pub fn out_mut(&mut self) -> &mut Vec<u8> {
        match self {
            Self::Fast(g) => &mut g.bits.out,
            Self::Flate(g) => g.get_mut(),
        }
    }

    /// How many compressed bytes wait in [`out_mut`](Self::out_mut).
    pub fn out_len(&self) -> usize {
        match self {
            Self::Fast(g) => g.bits.out.len(),
            Self::Flate(g) => g.get_ref().len(),
        }
    }

    /// A sync flush: everything written so far can be decompressed from the output.
    ///
    /// # Errors
    /// Only flate2's, which into memory does not fail.
    pub fn flush(&mut self) -> io::Result<()> {
        match self {
            Self::Fast(g) => {
                g.sync_flush();
                Ok(())
            }
            Self::Flate(g) => g.flush(),
        }
    }

    /// Ends the stream (its trailer) and returns the output.
    ///
    /// # Errors
    /// Only flate2's, which into memory does not fail.
    pub fn finish(self) -> io::Result<Vec<u8>> {
        match self {
            Self::Fast(g) => Ok(g.finish()),
            Self::Flate(g) => g.finish(),
        }
    }
}

/// Deflate's window: a match reaches at most this far back.
const WINDOW: usize = 32 * 1024;
/// The input kept is cut back to the window once it reaches this size.
const KEEP_MAX: usize = 256 * 1024;
/// A block is emitted once it holds this many symbols (a record is ~60), so its code
/// tables (~80 B) are paid once for hundreds of records.
const BLOCK_SYMBOLS: usize = 16 * 1024;
/// Where matches may start.
const ANCHOR: u8 = b',';
/// A match is looked up by the 8 bytes at an anchor.
const KEY: usize = 8;
const HASH_BITS: u32 = 14;

/// Base length and extra bits of length symbols 257–285 (RFC 1951, 3.2.5).
const LEN_BASE: [u16; 29] = [
    3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131,
    163, 195, 227, 258,
];
const LEN_EXTRA: [u8; 29] =
    [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0];
/// Base distance and extra bits of distance codes 0–29.
const DIST_BASE: [u16; 30] = [
    1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537,
    2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577,
];
const DIST_EXTRA: [u8; 30] = [
    0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13,
    13,
];
/// The order of the code length code's lengths in a block header (RFC 1951, 3.2.7).
const CL_ORDER: [usize; 19] = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15];

/// Length 0–258 → its symbol's index into [`LEN_BASE`] (0 below 3, unused).
const LEN_INDEX: [u8; 259] = {
    let mut t = [0u8; 259];
    let mut l = 3;
    while l < 259 {
        let mut i = 28;
        while LEN_BASE[i] as usize > l {
            i -= 1;
        }
        t[l] = i as u8;
        l += 1;
    }
    t
};

/// Distance → its code: `[d - 1]` up to 256, `[256 + (d - 1) >> 7]` beyond (the codes past
/// 256 all start at a multiple of 128, plus one).
const DIST_CODE: [u8; 512] = {
    let mut t = [0u8; 512];
    let mut k = 0;
    while k < 512 {
        let d = if k < 256 { k + 1 } else { ((k - 256) << 7) + 1 };
        let mut c = 29;
        while DIST_BASE[c] as usize > d {
            c -= 1;
        }
        t[k] = c as u8;
        k += 1;
    }
    t
};

/// Length 3–258 → its symbol's index into [`LEN_BASE`].
#[inline]
fn len_index(len: usize) -> usize {
    usize::from(LEN_INDEX[len])
}

/// Distance 1–32768 → its code.
#[inline]
fn dist_code(dist: usize) -> usize {
    let k = if dist <= 256 { dist - 1 } else { 256 + ((dist - 1) >> 7) };
    usize::from(DIST_CODE[k])
}

/// Bits out, least significant first (deflate's order).
struct Bits {
    out: Vec<u8>,
    acc: u64,
    n: u32,
}

impl Bits {
    /// Appends the low `n` (≤ 32) bits of `v`.
    #[inline]
    fn put(&mut self, v: u32, n: u32) {
        self.acc |= u64::from(v) << self.n;
        self.n += n;
        if self.n >= 32 {
            self.out.extend_from_slice(&(self.acc as u32).to_le_bytes());
            self.acc >>= 32;
            self.n -= 32;
        }
    }

    /// Pads to a byte boundary with zero bits and writes out what is held.
    fn align(&mut self) {
        while self.n > 0 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.n = self.n.saturating_sub(8);
        }
        self.acc = 0;
    }
}

/// A parsed symbol: a literal byte, or a match (`MATCH | len << 16 | dist`).
const MATCH: u32 = 1 << 31;

/// The encoder: input kept for the window, the anchors' hash table, and the symbols of
/// the block being gathered.
pub struct FastGzip {
    bits: Bits,
    /// Input from `base` on: the window behind `done`, and what is not parsed yet.
    hist: Vec<u8>,
    /// Input before this is in `syms` (or already emitted).
    done: usize,
    /// Anchor key hash → position in `hist` + 1 (0: none).
    table: Vec<u32>,
    syms: Vec<u32>,
    lit_freq: [u32; 286],
    dist_freq: [u32; 30],
    crc: crc32fast::Hasher,
    size: u32,
    /// The last match's distance (0: none yet).
    last_d: usize,
}

impl FastGzip {
    fn new(out: Vec<u8>) -> Self {
        let mut bits = Bits { out, acc: 0, n: 0 };
        // ID1 ID2, deflate, no flags, no time, no extra flags, OS: Unix.
        bits.out.extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3]);
        Self {
            bits,
            hist: Vec::with_capacity(KEEP_MAX + 64 * 1024),
            done: 0,
            table: vec![0; 1 << HASH_BITS],
            syms: Vec::with_capacity(BLOCK_SYMBOLS + 1024),
            lit_freq: [0; 286],
            dist_freq: [0; 30],
            crc: crc32fast::Hasher::new(),
            size: 0,
            last_d: 0,
        }
    }

    fn write(&mut self, data: &[u8]) {
        self.crc.update(data);
        self.size = self.size.wrapping_add(data.len() as u32);
        if self.hist.len() + data.len() > KEEP_MAX && self.done > WINDOW {
            self.slide();
        }
        self.hist.extend_from_slice(data);
        // The last bytes wait for more: an anchor there has no whole key yet.
        self.parse(self.hist.len().saturating_sub(KEY - 1));
        if self.syms.len() >= BLOCK_SYMBOLS {
            self.block(false);
        }
    }

    /// Drops input older than the window, moving the table's positions with it.
    fn slide(&mut self) {
        let cut = self.done - WINDOW;
        self.hist.drain(..cut);
        self.done -= cut;
        let cut = cut as u32;
        for t in &mut self.table {
            *t = t.saturating_sub(cut);
        }
    }

    fn load(&self, p: usize) -> u64 {
        let mut k = [0; KEY];
        k.copy_from_slice(&self.hist[p..p + KEY]);
        u64::from_le_bytes(k)
    }

    fn hash(key: u64) -> usize {
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - HASH_BITS)) as usize
    }

    /// Parses `hist[done..end]` into symbols: literals, and a match wherever the key at
    /// an anchor was seen within the window. Only anchors looked up are entered in the
    /// table, not those a match runs over: those keep pointing at an older record with the
    /// same text, which measured both faster and smaller (a match into an older record
    /// often runs further). The last match's distance is tried first: the record it points
    /// into is the one the text has followed so far (7 % smaller output, same speed).
    fn parse(&mut self, end: usize) {
        let mut lit = self.done;
        let mut pos = self.done;
        while pos < end && pos + KEY <= self.hist.len() {
            let last = end.min(self.hist.len() - KEY + 1);
            let Some(off) = memchr::memchr(ANCHOR, &self.hist[pos..last]) else { break };
            let a = pos + off;
            let key = self.load(a);
            let h = Self::hash(key);
            let cand = self.table[h] as usize;
            self.table[h] = a as u32 + 1;
            pos = a + 1;
            let d = if self.last_d != 0 && self.last_d <= a && self.load(a - self.last_d) == key {
                self.last_d
            } else if cand != 0 && a - (cand - 1) <= WINDOW && self.load(cand - 1) == key {
                a - (cand - 1)
            } else {
                continue;
            };
            let (s, e) = self.extend(a, d, lit);
            self.literals(lit, s);
            self.matched(e - s, d);
            self.last_d = d;
            lit = e;
            pos = e;
        }
        let to = end.max(lit);
        self.literals(lit, to);
        self.done = to;
    }

    /// The match at distance `d` through the key at `a`: back to `lit` at most, and on
    /// as far as the bytes agree. Returns its start and end.
    fn extend(&self, a: usize, d: usize, lit: usize) -> (usize, usize) {
        let h = &self.hist;
        let mut s = a;
        while s > lit && s > d && h[s - 1] == h[s - 1 - d] {
            s -= 1;
        }
        let word = |p: usize| u64::from_le_bytes(h[p..p + 8].try_into().unwrap_or_default());
        let mut e = a + KEY;
        while e + 8 <= h.len() {
            let x = word(e) ^ word(e - d);
            if x != 0 {
                return (s, e + (x.trailing_zeros() / 8) as usize);
            }
            e += 8;
        }
        while e < h.len() && h[e] == h[e - d] {
            e += 1;
        }
        (s, e)
    }

    fn literals(&mut self, from: usize, to: usize) {
        for &b in &self.hist[from..to] {
            self.lit_freq[usize::from(b)] += 1;
            self.syms.push(u32::from(b));
        }
    }

    /// A match of `len` bytes (≥ 3) at distance `d`, cut into pieces of at most 258.
    fn matched(&mut self, mut len: usize, d: usize) {
        let dc = dist_code(d);
        while len > 0 {
            let l = match len {
                0..=258 => len,
                259..=260 => len - 3,
                _ => 258,
            };
            self.lit_freq[257 + len_index(l)] += 1;
            self.dist_freq[dc] += 1;
            self.syms.push(MATCH | (l as u32) << 16 | d as u32);
            len -= l;
        }
    }

    /// Emits the gathered symbols as one block with its own Huffman codes.
    fn block(&mut self, last: bool) {
        if self.syms.is_empty() {
            if last {
                // A final block of fixed codes holding only its end: 1, 01, then 0000000.
                self.bits.put(0b011, 10);
            }
            return;
        }
        // The literal/length tree has two codes at least: the end of block and a symbol.
        // The distance tree may have none or one (a block of literals, one distance), and a
        // one-code tree is a corner decoders disagree on (zlib refuses an incomplete code):
        // then distances 1 and 2 fill it out. The code length code always has two as well:
        // 257 or more lengths cannot all be the same non-zero length.
        self.lit_freq[256] = 1;
        if self.dist_freq.iter().filter(|&&x| x > 0).count() < 2 {
            for d in &mut self.dist_freq[..2] {
                *d = (*d).max(1);
            }
        }
        let lit_len = code_lengths(&self.lit_freq, 15);
        let dist_len = code_lengths(&self.dist_freq, 15);
        let nlit = 257.max(lit_len.iter().rposition(|&l| l > 0).map_or(0, |i| i + 1));
        let ndist = 1.max(dist_len.iter().rposition(|&l| l > 0).map_or(0, |i| i + 1));
        let mut all: Vec<u8> = lit_len[..nlit].to_vec();
        all.extend_from_slice(&dist_len[..ndist]);
        let runs = run_lengths(&all);
        let mut cl_freq = [0u32; 19];
        for &(sym, _) in &runs {
            cl_freq[usize::from(sym)] += 1;
        }
        let cl_len = code_lengths(&cl_freq, 7);
        let ncl = 4.max(CL_ORDER.iter().rposition(|&i| cl_len[i] > 0).map_or(0, |i| i + 1));

        let b = &mut self.bits;
        b.put(u32::from(last) | 0b10 << 1, 3);
        b.put((nlit - 257) as u32, 5);
        b.put((ndist - 1) as u32, 5);
        b.put((ncl - 4) as u32, 4);
        for &i in &CL_ORDER[..ncl] {
            b.put(u32::from(cl_len[i]), 3);
        }
        let cl_code = canonical(&cl_len);
        for &(sym, extra) in &runs {
            let s = usize::from(sym);
            b.put(cl_code[s], u32::from(cl_len[s]));
            match sym {
                16 => b.put(u32::from(extra), 2),
                17 => b.put(u32::from(extra), 3),
                18 => b.put(u32::from(extra), 7),
                _ => {}
            }
        }
        let lit_code = canonical(&lit_len);
        let dist_code_bits = canonical(&dist_len);
        for &s in &self.syms {
            if s & MATCH == 0 {
                let s = s as usize;
                b.put(lit_code[s], u32::from(lit_len[s]));
                continue;
            }
            let (l, d) = (((s >> 16) & 0x1ff) as usize, (s & 0xffff) as usize);
            let li = len_index(l);
            b.put(lit_code[257 + li], u32::from(lit_len[257 + li]));
            b.put((l - usize::from(LEN_BASE[li])) as u32, u32::from(LEN_EXTRA[li]));
            let dc = dist_code(d);
            b.put(dist_code_bits[dc], u32::from(dist_len[dc]));
            b.put((d - usize::from(DIST_BASE[dc])) as u32, u32::from(DIST_EXTRA[dc]));
        }
        b.put(lit_code[256], u32::from(lit_len[256]));
        self.syms.clear();
        self.lit_freq = [0; 286];
        self.dist_freq = [0; 30];
    }

    /// Parses all the input, ends the block, and adds an empty stored block so the output
    /// ends on a byte boundary: what zlib's Z_SYNC_FLUSH does.
    fn sync_flush(&mut self) {
        self.parse(self.hist.len());
        self.block(false);
        self.bits.put(0, 3);
        self.bits.align();
        self.bits.out.extend_from_slice(&[0, 0, 0xff, 0xff]);
    }

    fn finish(mut self) -> Vec<u8> {
        self.parse(self.hist.len());
        self.block(true);
        self.bits.align();
        let crc = self.crc.clone().finalize();
        self.bits.out.extend_from_slice(&crc.to_le_bytes());
        self.bits.out.extend_from_slice(&self.size.to_le_bytes());
        self.bits.out
    }
}

/// Huffman code lengths for `freq`, none longer than `limit`; 0 for an unused symbol.
///
/// The lengths of a Huffman tree, then, if any is over the limit, the counts per length
/// cut to the limit and made to fit again (the Kraft sum back to one), with the shortest
/// codes given to the most frequent symbols.
fn code_lengths(freq: &[u32], limit: u8) -> Vec<u8> {
    let mut lens = vec![0u8; freq.len()];
    let mut used: Vec<usize> = (0..freq.len()).filter(|&i| freq[i] > 0).collect();
    if used.len() < 2 {
        for &i in &used {
            lens[i] = 1;
        }
        return lens;
    }
    // Tree: leaves 0..n, inner nodes after; parent of each.
    let n = used.len();
    let mut parent = vec![0usize; 2 * n - 1];
    let mut heap: std::collections::BinaryHeap<std::cmp::Reverse<(u64, usize)>> =
        used.iter().enumerate().map(|(k, &i)| std::cmp::Reverse((u64::from(freq[i]), k))).collect();
    let mut next = n;
    while heap.len() > 1 {
        let (Some(std::cmp::Reverse((fa, a))), Some(std::cmp::Reverse((fb, b)))) =
            (heap.pop(), heap.pop())
        else {
            break;
        };
        parent[a] = next;
        parent[b] = next;
        heap.push(std::cmp::Reverse((fa + fb, next)));
        next += 1;
    }
    let root = next - 1;
    // Inner nodes were made in order, so each node's parent comes after it.
    let mut depth = vec![0u32; 2 * n - 1];
    for k in (0..root).rev() {
        depth[k] = depth[parent[k]] + 1;
    }
    let limit_u = u32::from(limit);
    let mut count = vec![0u32; limit_u as usize + 1];
    for d in &depth[..n] {
        count[(*d).min(limit_u) as usize] += 1;
    }
    let full = 1u64 << limit_u;
    let mut kraft: u64 = (1..=limit_u).map(|l| u64::from(count[l as usize]) << (limit_u - l)).sum();
    while kraft > full {
        // Lengthen a code shorter than the limit, taking one from the limit's group.
        count[limit_u as usize] -= 1;
        if let Some(l) = (1..limit_u as usize).rev().find(|&l| count[l] > 0) {
            count[l] -= 1;
            count[l + 1] += 2;
        }
        kraft -= 1;
    }
    used.sort_by(|&a, &b| freq[b].cmp(&freq[a]).then(a.cmp(&b)));
    let mut it = used.iter();
    for l in 1..=limit {
        for _ in 0..count[usize::from(l)] {
            if let Some(&i) = it.next() {
                lens[i] = l;
            }
        }
    }
    lens
}

/// Canonical codes for `lens` (RFC 1951, 3.2.2), bit-reversed for writing least
/// significant bit first.
fn canonical(lens: &[u8]) -> Vec<u32> {
    let mut count = [0u32; 16];
    for &l in lens {
        count[usize::from(l)] += 1;
    }
    count[0] = 0;
    let mut next = [0u32; 16];
    let mut code = 0;
    for l in 1..16 {
        code = (code + count[l - 1]) << 1;
        next[l] = code;
    }
    lens.iter()
        .map(|&l| {
            if l == 0 {
                return 0;
            }
            let c = next[usize::from(l)];
            next[usize::from(l)] += 1;
            c.reverse_bits() >> (32 - u32::from(l))
        })
        .collect()
}

/// The code length alphabet's symbols for `lens`: lengths, 16 (repeat the last 3–6
/// times), 17 (3–10 zeros), 18 (11–138 zeros), each with its extra bits' value.
fn run_lengths(lens: &[u8]) -> Vec<(u8, u8)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < lens.len() {
        let l = lens[i];
        let run = lens[i..].iter().take_while(|&&x| x == l).count();
        if l == 0 && run >= 3 {
            let r = run.min(138);
            out.push(if r >= 11 { (18, (r - 11) as u8) } else { (17, (r - 3) as u8) });
            i += r;
        } else if l != 0 && run >= 4 {
            out.push((l, 0));
            let r = (run - 1).min(6);
            out.push((16, (r - 3) as u8));
            i += 1 + r;
        } else {
            out.push((l, 0));
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests;

//! One-line JSON for records: serde_json's compact writer, with a formatter ([`Floats`])
//! that writes a float equal to the last one as a copy of its text.
//!
//! A flow of one sample has seven equal numbers in each of its summaries (28 in all), and
//! formatting a float is a third of serialising a record (benches/RESULTS.md, D18). Our
//! own serializer beside serde_json was somewhat faster still, and was removed as a second
//! serializer to keep; D18 holds what each cost, and the writer thread's cost since.

use std::io;

use serde::Serialize;
use serde_json::ser::{CompactFormatter, Formatter};

/// Writes `value` as one line of compact JSON (no newline) onto `out`: the bytes
/// `serde_json::to_writer` writes.
///
/// # Errors
/// A serialisation error of `value` (a map with non-string keys, say): a bug.
pub fn write_line(value: &impl Serialize, out: &mut Vec<u8>) -> serde_json::Result<()> {
    value.serialize(&mut serde_json::Serializer::with_formatter(out, Floats::default()))
}

/// serde_json's compact formatter, keeping the last float written as text. (serde_json
/// writes a float that is not finite as `null` before a formatter sees it.)
#[derive(Debug, Default)]
pub struct Floats {
    /// The last float's bits and text (`len` 0: none yet).
    last: u64,
    text: [u8; 32],
    len: usize,
}

impl Formatter for Floats {
    fn write_f64<W: ?Sized + io::Write>(&mut self, writer: &mut W, value: f64) -> io::Result<()> {
        if self.len == 0 || value.to_bits() != self.last {
            // A float's shortest text is at most 24 bytes; a longer one fails here, and is
            // then written as it comes, uncached.
            let cap = self.text.len();
            let mut rest = &mut self.text[..];
            if CompactFormatter.write_f64(&mut rest, value).is_err() {
                self.len = 0;
                return CompactFormatter.write_f64(writer, value);
            }
            self.len = cap - rest.len();
            self.last = value.to_bits();
        }
        writer.write_all(&self.text[..self.len])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn any_text_and_numbers_as_serde_json_writes_them(
            k in ".*", v in ".*", n in any::<i64>(), u in any::<u64>(), f in any::<f64>(),
        ) {
            let value = serde_json::json!({ k.clone(): [v.clone(), n, u, f, f], "o": { v: k } });
            let mut ours = Vec::new();
            write_line(&value, &mut ours).unwrap();
            prop_assert_eq!(ours, serde_json::to_vec(&value).unwrap());
        }
    }

    #[test]
    fn the_same_bytes_as_serde_json() {
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
            f64::NAN,
            f64::INFINITY,
            -3.0,
        ];
        for &a in &floats {
            for &b in &floats {
                let v = serde_json::json!({"x": [a, a, b, b, a], "y": a, "z": [b, 1, "s"]});
                let mut ours = Vec::new();
                write_line(&v, &mut ours).unwrap();
                assert_eq!(ours, serde_json::to_vec(&v).unwrap(), "{a} {b}");
            }
        }
    }
}

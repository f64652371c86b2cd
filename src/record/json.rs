//! One-line JSON for records, as serde_json writes it, with fewer and larger writes and
//! repeated numbers written once (the `ser` module).

use serde::Serialize;

/// Writes `value` as one line of compact JSON (no newline) onto `out`: the bytes
/// `serde_json::to_writer` writes, through our serializer (`record::ser`).
///
/// # Errors
/// A serialisation error of `value` (a map with non-string keys, say): a bug.
pub fn write_line(value: &impl Serialize, out: &mut Vec<u8>) -> serde_json::Result<()> {
    value.serialize(&mut super::ser::JsonLine::new(out))
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

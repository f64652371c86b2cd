//! A serde serializer that writes the bytes serde_json's compact form gives, with fewer and
//! larger writes: a struct's field name goes out with its comma, quotes and colon at once
//! and is not scanned for characters to escape (serde derive's names are Rust identifiers
//! or our renames, all plain). Everything else is written as serde_json writes it: its
//! formatter for numbers, its escaping for strings that need any, `null` for a float that
//! is not finite. The tests compare the two byte for byte (`json.rs`, the writer's).
//!
//! A flow of one sample has seven equal numbers in each of its summaries (28 in all), and
//! formatting a float is a third of serialising a record (benches/RESULTS.md, D18):
//! [`Floats`] keeps the last float's text, and the next equal float is copied instead.

use serde::Serialize;
use serde::ser::{self, Error as _};
use serde_json::ser::{CompactFormatter, Formatter};

type Result<T = ()> = std::result::Result<T, serde_json::Error>;

/// Writes a value as serde_json's compact JSON onto `out`.
pub struct JsonLine<'a> {
    out: &'a mut Vec<u8>,
    floats: Floats,
}

/// The last float written, as serde_json's compact formatter wrote it.
#[derive(Default)]
struct Floats {
    /// Its bits and text (`len` 0: none yet).
    last: u64,
    text: [u8; 32],
    len: usize,
}

impl Floats {
    fn write(&mut self, out: &mut Vec<u8>, value: f64) -> std::io::Result<()> {
        if self.len == 0 || value.to_bits() != self.last {
            // A float's shortest text is at most 24 bytes; a longer one fails here, and is
            // then written as it comes, uncached.
            let cap = self.text.len();
            let mut rest = &mut self.text[..];
            if CompactFormatter.write_f64(&mut rest, value).is_err() {
                self.len = 0;
                return CompactFormatter.write_f64(out, value);
            }
            self.len = cap - rest.len();
            self.last = value.to_bits();
        }
        out.extend_from_slice(&self.text[..self.len]);
        Ok(())
    }
}

impl<'a> JsonLine<'a> {
    /// A serializer onto `out`.
    pub fn new(out: &'a mut Vec<u8>) -> Self {
        Self { out, floats: Floats::default() }
    }
}

impl JsonLine<'_> {
    fn str(&mut self, s: &str) -> Result {
        // Most strings (addresses, times, names) need no escape: copied in one go.
        if plain(s.as_bytes()) {
            self.out.reserve(s.len() + 2);
            self.out.push(b'"');
            self.out.extend_from_slice(s.as_bytes());
            self.out.push(b'"');
            Ok(())
        } else {
            ser::Serializer::serialize_str(&mut serde_json::Serializer::new(&mut *self.out), s)
        }
    }

    /// A number, as serde_json's compact formatter writes it.
    fn number(&mut self, write: impl FnOnce(&mut Vec<u8>) -> std::io::Result<()>) -> Result {
        write(self.out).map_err(serde_json::Error::io)
    }

    /// `{"variant":` before a variant's content.
    fn variant_open(&mut self, variant: &str) -> Result {
        self.out.push(b'{');
        self.str(variant)?;
        self.out.push(b':');
        Ok(())
    }
}

/// No byte of `s` needs an escape in JSON. Every byte is looked at (no early exit), which
/// the compiler turns into vector code: an early exit went a byte at a time.
fn plain(s: &[u8]) -> bool {
    s.iter().fold(true, |ok, &b| ok & (b >= 0x20) & (b != b'"') & (b != b'\\'))
}

/// A sequence, map or struct being written: whether an element was written yet, and how
/// many closing bytes it ends with (`]`, `}`, or `]}`/`}}` for a variant's).
pub struct Compound<'s, 'a> {
    line: &'s mut JsonLine<'a>,
    first: bool,
    close: &'static [u8],
}

impl Compound<'_, '_> {
    fn comma(&mut self) {
        if !std::mem::take(&mut self.first) {
            self.line.out.push(b',');
        }
    }

    fn end(self) -> Result {
        self.line.out.extend_from_slice(self.close);
        Ok(())
    }
}

impl<'s, 'a> ser::Serializer for &'s mut JsonLine<'a> {
    type Ok = ();
    type Error = serde_json::Error;
    type SerializeSeq = Compound<'s, 'a>;
    type SerializeTuple = Compound<'s, 'a>;
    type SerializeTupleStruct = Compound<'s, 'a>;
    type SerializeTupleVariant = Compound<'s, 'a>;
    type SerializeMap = Compound<'s, 'a>;
    type SerializeStruct = Compound<'s, 'a>;
    type SerializeStructVariant = Compound<'s, 'a>;

    fn serialize_bool(self, v: bool) -> Result {
        self.out.extend_from_slice(if v { b"true" } else { b"false" });
        Ok(())
    }
    fn serialize_i8(self, v: i8) -> Result {
        self.number(|o| CompactFormatter.write_i8(o, v))
    }
    fn serialize_i16(self, v: i16) -> Result {
        self.number(|o| CompactFormatter.write_i16(o, v))
    }
    fn serialize_i32(self, v: i32) -> Result {
        self.number(|o| CompactFormatter.write_i32(o, v))
    }
    fn serialize_i64(self, v: i64) -> Result {
        self.number(|o| CompactFormatter.write_i64(o, v))
    }
    fn serialize_i128(self, v: i128) -> Result {
        self.number(|o| CompactFormatter.write_i128(o, v))
    }
    fn serialize_u8(self, v: u8) -> Result {
        self.number(|o| CompactFormatter.write_u8(o, v))
    }
    fn serialize_u16(self, v: u16) -> Result {
        self.number(|o| CompactFormatter.write_u16(o, v))
    }
    fn serialize_u32(self, v: u32) -> Result {
        self.number(|o| CompactFormatter.write_u32(o, v))
    }
    fn serialize_u64(self, v: u64) -> Result {
        self.number(|o| CompactFormatter.write_u64(o, v))
    }
    fn serialize_u128(self, v: u128) -> Result {
        self.number(|o| CompactFormatter.write_u128(o, v))
    }
    fn serialize_f32(self, v: f32) -> Result {
        if !v.is_finite() {
            return self.serialize_unit();
        }
        self.number(|o| CompactFormatter.write_f32(o, v))
    }
    fn serialize_f64(self, v: f64) -> Result {
        if !v.is_finite() {
            return self.serialize_unit();
        }
        self.floats.write(self.out, v).map_err(serde_json::Error::io)
    }
    fn serialize_char(self, v: char) -> Result {
        self.str(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_str(self, v: &str) -> Result {
        self.str(v)
    }
    fn serialize_bytes(self, v: &[u8]) -> Result {
        use ser::SerializeSeq;
        let mut s = self.serialize_seq(Some(v.len()))?;
        for b in v {
            s.serialize_element(b)?;
        }
        s.end()
    }
    fn serialize_none(self) -> Result {
        self.serialize_unit()
    }
    fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> Result {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result {
        self.out.extend_from_slice(b"null");
        Ok(())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result {
        self.serialize_unit()
    }
    fn serialize_unit_variant(self, _n: &'static str, _i: u32, variant: &'static str) -> Result {
        self.str(variant)
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(self, _n: &'static str, v: &T) -> Result {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result {
        self.variant_open(variant)?;
        value.serialize(&mut *self)?;
        self.out.push(b'}');
        Ok(())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Self::SerializeSeq> {
        self.out.push(b'[');
        Ok(Compound { line: self, first: true, close: b"]" })
    }
    fn serialize_tuple(self, len: usize) -> Result<Self::SerializeTuple> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleStruct> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleVariant> {
        self.variant_open(variant)?;
        self.out.push(b'[');
        Ok(Compound { line: self, first: true, close: b"]}" })
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Self::SerializeMap> {
        self.out.push(b'{');
        Ok(Compound { line: self, first: true, close: b"}" })
    }
    fn serialize_struct(self, _name: &'static str, _len: usize) -> Result<Self::SerializeStruct> {
        self.serialize_map(None)
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStructVariant> {
        self.variant_open(variant)?;
        self.out.push(b'{');
        Ok(Compound { line: self, first: true, close: b"}}" })
    }
}

impl ser::SerializeSeq for Compound<'_, '_> {
    type Ok = ();
    type Error = serde_json::Error;
    fn serialize_element<T: ?Sized + Serialize>(&mut self, value: &T) -> Result {
        self.comma();
        value.serialize(&mut *self.line)
    }
    fn end(self) -> Result {
        Compound::end(self)
    }
}

/// The other sequences serde has (tuples, tuple structs and variants) are written as
/// sequences, as serde_json writes them.
macro_rules! as_a_sequence {
    ($($tr:ident :: $method:ident),*) => {$(
        impl ser::$tr for Compound<'_, '_> {
            type Ok = ();
            type Error = serde_json::Error;
            fn $method<T: ?Sized + Serialize>(&mut self, value: &T) -> Result {
                ser::SerializeSeq::serialize_element(self, value)
            }
            fn end(self) -> Result {
                Compound::end(self)
            }
        }
    )*};
}

as_a_sequence!(
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

impl ser::SerializeMap for Compound<'_, '_> {
    type Ok = ();
    type Error = serde_json::Error;
    fn serialize_key<T: ?Sized + Serialize>(&mut self, key: &T) -> Result {
        // Rare (records have no maps): serde_json's own text of the key, which must be a
        // string, or a number or bool it puts in quotes.
        self.comma();
        let text = serde_json::to_vec(key)?;
        match text.first() {
            Some(b'"') => self.line.out.extend_from_slice(&text),
            Some(b'n' | b'[' | b'{') | None => {
                return Err(serde_json::Error::custom("key must be a string"));
            }
            Some(_) => {
                self.line.out.push(b'"');
                self.line.out.extend_from_slice(&text);
                self.line.out.push(b'"');
            }
        }
        self.line.out.push(b':');
        Ok(())
    }
    fn serialize_value<T: ?Sized + Serialize>(&mut self, value: &T) -> Result {
        value.serialize(&mut *self.line)
    }
    fn end(self) -> Result {
        Compound::end(self)
    }
}

impl ser::SerializeStruct for Compound<'_, '_> {
    type Ok = ();
    type Error = serde_json::Error;
    fn serialize_field<T: ?Sized + Serialize>(&mut self, key: &'static str, value: &T) -> Result {
        debug_assert!(plain(key.as_bytes()), "{key}");
        // `,"Key":` copied unscanned, after one reserve; through `comma` (a push before the
        // reserve) a record took longer (benches/RESULTS.md, D18).
        let out = &mut *self.line.out;
        out.reserve(key.len() + 4);
        if !std::mem::take(&mut self.first) {
            out.push(b',');
        }
        out.push(b'"');
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(b"\":");
        value.serialize(&mut *self.line)
    }
    fn end(self) -> Result {
        Compound::end(self)
    }
}

impl ser::SerializeStructVariant for Compound<'_, '_> {
    type Ok = ();
    type Error = serde_json::Error;
    fn serialize_field<T: ?Sized + Serialize>(&mut self, key: &'static str, value: &T) -> Result {
        ser::SerializeStruct::serialize_field(self, key, value)
    }
    fn end(self) -> Result {
        Compound::end(self)
    }
}

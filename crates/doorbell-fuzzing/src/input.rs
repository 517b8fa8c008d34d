//! The byte format every structured harness reads, and its writer.
//!
//! A harness takes its choices from the front of the fuzzer's bytes with
//! [`Input`]: big-endian integers, flags and byte strings. Reading past the
//! end gives zeros (and empty strings), so every input, the empty one
//! included, is a valid script: the fuzzer never wastes a run on bytes a
//! harness refuses. [`Seed`] writes the same format, so that the seed
//! corpus is made of values a reader of this module can follow (a valid
//! frame, a valid WQE), not of bytes no one can read.

/// Reads a harness's choices from the front of its input.
#[derive(Debug, Clone)]
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    /// A reader over `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Self { data }
    }

    /// True once every byte has been read.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Up to `n` bytes (fewer at the end of the input).
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        head
    }

    /// `N` bytes, zero-padded at the end of the input.
    pub fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut a = [0u8; N];
        let b = self.bytes(N);
        a[..b.len()].copy_from_slice(b);
        a
    }

    /// One byte.
    pub fn u8(&mut self) -> u8 {
        self.array::<1>()[0]
    }

    /// A flag: the low bit of one byte.
    pub fn bool(&mut self) -> bool {
        self.u8() & 1 != 0
    }

    /// A big-endian `u16`.
    pub fn u16(&mut self) -> u16 {
        u16::from_be_bytes(self.array())
    }

    /// A big-endian `u32`.
    pub fn u32(&mut self) -> u32 {
        u32::from_be_bytes(self.array())
    }

    /// A big-endian `u64`.
    pub fn u64(&mut self) -> u64 {
        u64::from_be_bytes(self.array())
    }

    /// A byte string: a length byte, then up to that many bytes.
    pub fn short_bytes(&mut self) -> &'a [u8] {
        let n = usize::from(self.u8());
        self.bytes(n)
    }

    /// A byte string: a big-endian `u16` length, then up to that many bytes.
    pub fn long_bytes(&mut self) -> &'a [u8] {
        let n = usize::from(self.u16());
        self.bytes(n)
    }

    /// Everything not read yet.
    pub fn rest(&mut self) -> &'a [u8] {
        core::mem::take(&mut self.data)
    }
}

/// Writes an input that [`Input`] reads back value for value.
#[derive(Debug, Clone)]
pub struct Seed(Vec<u8>);

impl Default for Seed {
    fn default() -> Self {
        Self::new()
    }
}

impl Seed {
    /// An empty input, with room already allocated. Not a constant: rustc
    /// 1.95's MIR GVN merges two equal constant temporaries passed by
    /// value (rust-lang/rust#158830), so a function that starts two seeds
    /// from an empty `Vec` each and grows them in place (`bytes` takes
    /// `self`) wrote the second into the first one's freed buffer in a
    /// release build. An allocation is never merged.
    pub fn new() -> Self {
        Self(Vec::with_capacity(64))
    }

    /// The bytes written.
    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }

    /// Raw bytes ([`Input::bytes`], [`Input::array`], [`Input::rest`]).
    pub fn bytes(mut self, b: &[u8]) -> Self {
        self.0.extend_from_slice(b);
        self
    }

    /// [`Input::u8`].
    pub fn u8(self, v: u8) -> Self {
        self.bytes(&[v])
    }

    /// [`Input::bool`].
    pub fn bool(self, v: bool) -> Self {
        self.u8(u8::from(v))
    }

    /// [`Input::u16`].
    pub fn u16(self, v: u16) -> Self {
        self.bytes(&v.to_be_bytes())
    }

    /// [`Input::u32`].
    pub fn u32(self, v: u32) -> Self {
        self.bytes(&v.to_be_bytes())
    }

    /// [`Input::u64`].
    pub fn u64(self, v: u64) -> Self {
        self.bytes(&v.to_be_bytes())
    }

    /// [`Input::short_bytes`]; at most 255 bytes of `b` are written.
    pub fn short_bytes(self, b: &[u8]) -> Self {
        let b = &b[..b.len().min(usize::from(u8::MAX))];
        self.u8(b.len() as u8).bytes(b)
    }

    /// [`Input::long_bytes`]; at most 65535 bytes of `b` are written.
    pub fn long_bytes(self, b: &[u8]) -> Self {
        let b = &b[..b.len().min(usize::from(u16::MAX))];
        self.u16(b.len() as u16).bytes(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_reads_back_value_for_value() {
        let b = Seed::new()
            .u8(7)
            .bool(true)
            .u16(0x1234)
            .u32(0xdead_beef)
            .u64(1 << 40)
            .short_bytes(b"abc")
            .long_bytes(b"defg")
            .bytes(b"rest")
            .into_bytes();
        let mut i = Input::new(&b);
        assert_eq!(i.u8(), 7);
        assert!(i.bool());
        assert_eq!(i.u16(), 0x1234);
        assert_eq!(i.u32(), 0xdead_beef);
        assert_eq!(i.u64(), 1 << 40);
        assert_eq!(i.short_bytes(), b"abc");
        assert_eq!(i.long_bytes(), b"defg");
        assert_eq!(i.rest(), b"rest");
        assert!(i.is_empty());
        assert_eq!((i.u32(), i.short_bytes()), (0, &b""[..]));
    }
}

//! Tensor payloads: raw little-endian bytes inside a msgpack `bin`, decoded into an aligned
//! `Vec<f32>`. msgpack float arrays cost 5 bytes and a branch per element; `bin` is a memcpy.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A dense f32 tensor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
pub struct Tensor {
    /// Dimensions, outermost first.
    pub shape: Vec<usize>,
    /// The values, row-major.
    #[serde(with = "f32_bytes")]
    pub data: Vec<f32>,
}

impl Tensor {
    /// A tensor of `shape`; fails unless `data` holds exactly the product of `shape` values.
    pub fn new(shape: Vec<usize>, data: Vec<f32>) -> Result<Self, crate::CodecError> {
        let t = Self { shape, data };
        t.validate()?;
        Ok(t)
    }

    /// A one-dimensional tensor.
    pub fn from_vec(data: Vec<f32>) -> Self {
        Self {
            shape: vec![data.len()],
            data,
        }
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// True when the tensor holds no values.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Checks that a decoded tensor's shape matches its data (a peer may lie).
    pub fn validate(&self) -> Result<(), crate::CodecError> {
        let expected = self
            .shape
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| crate::CodecError::Tensor("shape overflows".into()))?;
        let got = self.data.len();
        if expected != got {
            let why = format!("shape {:?} needs {expected} values, got {got}", self.shape);
            return Err(crate::CodecError::Tensor(why));
        }
        Ok(())
    }
}

/// `#[serde(with = "petrel_messages::tensor::f32_bytes")]` for a `Vec<f32>` field.
pub mod f32_bytes {
    use super::*;

    /// Writes the values as one msgpack `bin` of little-endian bytes.
    #[allow(clippy::ptr_arg)] // the vector's address names the field a payload was taken from
    pub fn serialize<S: Serializer>(data: &Vec<f32>, s: S) -> Result<S::Ok, S::Error> {
        // The field whose values `Frame::encode_chunks` moved out: write them from there.
        if cfg!(target_endian = "little") && data.is_empty() && crate::envelope::is_taken_slot(data)
        {
            return crate::envelope::with_taken(|taken| serialize_le(taken, s));
        }
        serialize_le(data, s)
    }

    /// Reads little-endian bytes into an aligned vector.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f32>, D::Error> {
        d.deserialize_bytes(LeVisitor::<f32>(std::marker::PhantomData))
    }
}

/// A plain number that travels as raw little-endian bytes in a msgpack `bin`
/// ([`f32_bytes`], [`f64_bytes`], [`u32_bytes`]).
pub trait LeValue: bytemuck::Pod {
    /// The type's name, for errors.
    const NAME: &'static str;
    /// The value of `bytes` (exactly `size_of::<Self>()` of them, little-endian).
    fn from_le(bytes: &[u8]) -> Self;
}

/// A `#[serde(with = ...)]` module for a `Vec` of an [`LeValue`] type.
macro_rules! le_bytes_module {
    ($(#[$doc:meta])* $name:ident, $t:ty) => {
        $(#[$doc])*
        pub mod $name {
            use super::{LeVisitor, serialize_le};
            use serde::{Deserializer, Serializer};

            /// Writes the values as little-endian bytes.
            pub fn serialize<S: Serializer>(data: &[$t], s: S) -> Result<S::Ok, S::Error> {
                serialize_le(data, s)
            }

            /// Reads little-endian bytes; fails unless the length is a multiple of the width.
            pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<$t>, D::Error> {
                d.deserialize_bytes(LeVisitor::<$t>(std::marker::PhantomData))
            }
        }
    };
}

macro_rules! le_value {
    ($t:ty) => {
        impl LeValue for $t {
            const NAME: &'static str = stringify!($t);
            fn from_le(bytes: &[u8]) -> Self {
                let mut raw = [0u8; std::mem::size_of::<$t>()];
                raw.copy_from_slice(bytes);
                <$t>::from_le_bytes(raw)
            }
        }
    };
}
le_value!(f32);
le_value!(f64);
le_value!(u32);

/// Writes `data` as one msgpack `bin` of little-endian bytes, straight from the slice.
fn serialize_le<T: LeValue, S: Serializer>(data: &[T], s: S) -> Result<S::Ok, S::Error> {
    #[cfg(target_endian = "little")]
    {
        s.serialize_bytes(bytemuck::cast_slice(data))
    }
    #[cfg(target_endian = "big")]
    {
        let bytes: Vec<u8> = bytemuck::cast_slice::<T, u8>(data)
            .chunks_exact(std::mem::size_of::<T>())
            .flat_map(|c| c.iter().rev().copied())
            .collect();
        s.serialize_bytes(&bytes)
    }
}

/// Reads a `bin` of little-endian values into an aligned `Vec<T>`.
struct LeVisitor<T>(std::marker::PhantomData<T>);

impl<'de, T: LeValue> serde::de::Visitor<'de> for LeVisitor<T> {
    type Value = Vec<T>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "little-endian {} bytes", T::NAME)
    }

    fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Vec<T>, E> {
        // A token for a payload still in a received body's chunks (see `crate::body`):
        // copied from the chunks into the vector, not through a gathered buffer.
        if let Some(taken) = crate::body::take_payload::<T>(v) {
            return taken.map_err(E::custom);
        }
        values_from_le_bytes(v).map_err(E::custom)
    }

    fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Vec<T>, E> {
        self.visit_bytes(&v)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
        // Some encoders write bytes as an array of integers.
        let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 20));
        while let Some(b) = seq.next_element::<u8>()? {
            bytes.push(b);
        }
        values_from_le_bytes(&bytes).map_err(serde::de::Error::custom)
    }
}

/// Decodes little-endian f32 bytes into an aligned vector.
pub fn from_le_bytes(bytes: &[u8]) -> Result<Vec<f32>, crate::CodecError> {
    values_from_le_bytes(bytes)
}

/// Decodes little-endian bytes into an aligned `Vec<T>` (one copy).
pub fn values_from_le_bytes<T: LeValue>(bytes: &[u8]) -> Result<Vec<T>, crate::CodecError> {
    let width = std::mem::size_of::<T>();
    let name = T::NAME;
    let len = bytes.len();
    if !len.is_multiple_of(width) {
        let why = format!("{name} payload of {len} bytes is not a multiple of {width}");
        return Err(crate::CodecError::Tensor(why));
    }
    #[cfg(target_endian = "little")]
    {
        // One copy into uninitialised capacity: `pod_collect_to_vec` zeroes the vector
        // first, which costs as much as the copy itself for a 16 MiB row.
        let len = bytes.len() / width;
        let mut out: Vec<T> = Vec::with_capacity(len);
        // SAFETY: the capacity holds `len * width == bytes.len()` bytes, a fresh allocation
        // cannot overlap `bytes`, and every bit pattern is a valid `T` (`Pod`), so all
        // `len` elements are initialised before `set_len`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                out.as_mut_ptr().cast::<u8>(),
                bytes.len(),
            );
            out.set_len(len);
        }
        Ok(out)
    }
    #[cfg(target_endian = "big")]
    {
        Ok(bytes.chunks_exact(width).map(T::from_le).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensor_travels_as_bin() {
        let t = Tensor::new(vec![2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, -6.5]).unwrap();
        let mut buf = Vec::new();
        crate::encode_body(&t, &mut buf).unwrap();
        // 24 data bytes + small header: a float array would need 6 * 5 = 30 bytes for data.
        assert!(buf.len() < 24 + 24, "encoded {} bytes", buf.len());
        let back: Tensor = crate::decode_body("tensor", &buf).unwrap();
        assert_eq!(back, t);
    }

    #[test]
    fn decoding_keeps_every_bit_pattern_from_an_unaligned_buffer() {
        let values = [
            0.0f32,
            -0.0,
            1.5,
            f32::MIN_POSITIVE,
            f32::INFINITY,
            f32::from_bits(0x7fc0_0001),
        ];
        let mut buf = vec![0xAAu8];
        for v in values {
            buf.extend_from_slice(&v.to_le_bytes());
        }
        // Offset 1: the payload is not 4-byte aligned inside a received frame.
        let back = from_le_bytes(&buf[1..]).unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&back), bits(&values));
        assert!(from_le_bytes(&[]).unwrap().is_empty());
    }

    #[test]
    fn bad_payloads_are_errors() {
        assert!(from_le_bytes(&[1, 2, 3]).is_err());
        let t = Tensor {
            shape: vec![5],
            data: vec![1.0],
        };
        assert!(t.validate().is_err());
        assert!(Tensor::new(vec![2], vec![1.0]).is_err());
    }
}

le_bytes_module!(
    /// `#[serde(with = "petrel_messages::tensor::f64_bytes")]` for a `Vec<f64>`, read like
    /// [`f32_bytes`].
    f64_bytes,
    f64
);
le_bytes_module!(
    /// `#[serde(with = "petrel_messages::tensor::u32_bytes")]` for a `Vec<u32>` (indices):
    /// 4 bytes a value, where a msgpack array costs up to 5 and a branch per value.
    u32_bytes,
    u32
);

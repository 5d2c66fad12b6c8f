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
        let expected: usize = shape.iter().product();
        if expected != data.len() {
            return Err(crate::CodecError::Tensor(format!(
                "shape {shape:?} needs {expected} values, got {}",
                data.len()
            )));
        }
        Ok(Self { shape, data })
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
        if expected != self.data.len() {
            return Err(crate::CodecError::Tensor(format!(
                "shape {:?} needs {expected} values, got {}",
                self.shape,
                self.data.len()
            )));
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
        #[cfg(target_endian = "little")]
        {
            // The field whose values `Frame::encode_chunks` moved out: write the moved
            // values (the same bytes), from where they are now.
            if data.is_empty() && crate::envelope::is_taken_slot(data) {
                return crate::envelope::with_taken(|taken| {
                    s.serialize_bytes(bytemuck::cast_slice(taken))
                });
            }
            s.serialize_bytes(bytemuck::cast_slice(data))
        }
        #[cfg(target_endian = "big")]
        {
            let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
            s.serialize_bytes(&bytes)
        }
    }

    /// Reads little-endian bytes into an aligned vector.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f32>, D::Error> {
        // Straight from the decoder's bytes into the aligned vector: no intermediate
        // byte buffer (one copy of a large tensor instead of two).
        d.deserialize_bytes(F32Visitor)
    }

    struct F32Visitor;

    impl<'de> serde::de::Visitor<'de> for F32Visitor {
        type Value = Vec<f32>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("little-endian f32 bytes")
        }

        fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Vec<f32>, E> {
            // A token for a payload still in a received body's chunks (see `crate::body`):
            // copied from the chunks into the vector, not through a gathered buffer.
            if let Some(taken) = crate::body::take_f32_payload(v) {
                return taken.map_err(E::custom);
            }
            from_le_bytes(v).map_err(E::custom)
        }

        fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Vec<f32>, E> {
            self.visit_bytes(&v)
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<f32>, A::Error> {
            // Some encoders write bytes as an array of integers.
            let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 20));
            while let Some(b) = seq.next_element::<u8>()? {
                bytes.push(b);
            }
            from_le_bytes(&bytes).map_err(serde::de::Error::custom)
        }
    }
}

/// Decodes little-endian f32 bytes into an aligned vector.
pub fn from_le_bytes(bytes: &[u8]) -> Result<Vec<f32>, crate::CodecError> {
    if !bytes.len().is_multiple_of(4) {
        return Err(crate::CodecError::Tensor(format!(
            "f32 payload of {} bytes is not a multiple of 4",
            bytes.len()
        )));
    }
    #[cfg(target_endian = "little")]
    {
        // One copy into uninitialised capacity: `pod_collect_to_vec` zeroes the vector
        // first, which cost as much as the copy itself for a 16 MiB row (perf, issue 17).
        let len = bytes.len() / 4;
        let mut out: Vec<f32> = Vec::with_capacity(len);
        // SAFETY: the capacity holds `len * 4 == bytes.len()` bytes, a fresh allocation
        // cannot overlap `bytes`, and every bit pattern is a valid f32, so all `len`
        // elements are initialised before `set_len`.
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
        Ok(bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
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

/// `#[serde(with = "petrel_messages::tensor::f64_bytes")]` for a `Vec<f64>`: raw little-endian bytes on the wire.
pub mod f64_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes the values as little-endian bytes.
    pub fn serialize<S: Serializer>(data: &[f64], s: S) -> Result<S::Ok, S::Error> {
        let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
        s.serialize_bytes(&bytes)
    }

    /// Reads little-endian bytes; fails unless the length is a multiple of 8.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
        let bytes = serde_bytes::ByteBuf::deserialize(d)?;
        if bytes.len() % 8 != 0 {
            return Err(serde::de::Error::custom(format!(
                "f64 payload of {} bytes is not a multiple of 8",
                bytes.len()
            )));
        }
        Ok(bytes
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
            .collect())
    }
}

use super::*;
use crate::Tensor;
use proptest::prelude::*;
use serde::{Deserialize, Serialize};

/// `bytes` cut into chunks of the given sizes, cycled (the last chunk takes the rest).
fn chunked(bytes: &[u8], sizes: &[usize]) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut at = 0;
    let mut i = 0;
    while at < bytes.len() {
        let n = sizes[i % sizes.len()].max(1).min(bytes.len() - at);
        out.push(Bytes::copy_from_slice(&bytes[at..at + n]));
        at += n;
        i += 1;
    }
    out
}

fn encode<M: Serialize>(m: &M) -> Vec<u8> {
    let mut v = Vec::new();
    crate::encode_body(m, &mut v).unwrap();
    v
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Bit patterns over every sign, every exponent (zeros, subnormals, infinities, NaNs
/// with payloads) and mantissas from 0 to all ones.
fn patterns() -> Vec<f32> {
    let mut v: Vec<f32> = (0..=u16::MAX)
        .flat_map(|hi| {
            let hi = u32::from(hi) << 16;
            [hi, hi | 0xffff, hi | 0x8001]
        })
        .map(f32::from_bits)
        .collect();
    v.extend([
        0.0,
        -0.0,
        f32::MIN_POSITIVE,
        f32::MAX,
        f32::from_bits(0x7fc0_0001),
    ]);
    v
}

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct Blob {
    tensor: Tensor,
    step: u64,
}

#[test]
fn a_chunked_tensor_keeps_every_bit_pattern_and_is_copied_straight_out() {
    let t = Tensor::from_vec(patterns());
    let bytes = encode(&Blob {
        tensor: t.clone(),
        step: 7,
    });
    for sizes in [&[1usize][..], &[1200, 7, 1, 4093], &[65_537], &[3, 1452]] {
        let chunks = chunked(&bytes, sizes);
        // The scan elides the tensor's bytes, and the fast path takes them.
        let skeleton = Skeleton::scan(&chunks, bytes.len()).unwrap();
        assert_eq!(skeleton.elided.len(), 1);
        assert!(skeleton.bytes.len() < 100, "{}", skeleton.bytes.len());
        let fast: Blob = skeleton.decode(&chunks).unwrap();
        assert_eq!(bits(&fast.tensor.data), bits(&t.data));
        let body = Body::from_chunks(chunks);
        let back: Blob = body.decode("blob").unwrap();
        assert_eq!(bits(&back.tensor.data), bits(&t.data));
        assert_eq!((back.tensor.shape, back.step), (t.shape.clone(), 7));
    }
}

/// A residual delta as the STRADS Gauss-Seidel messages carry one: f64 values and u32
/// indices, each a raw little-endian `bin`.
#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct Delta {
    #[serde(with = "crate::tensor::u32_bytes")]
    rows: Vec<u32>,
    #[serde(with = "crate::tensor::f64_bytes")]
    values: Vec<f64>,
    #[serde(with = "crate::tensor::u32_bytes")]
    few: Vec<u32>,
}

#[test]
fn chunked_f64_and_u32_fields_keep_every_bit_and_are_copied_straight_out() {
    let values: Vec<f64> = (0..40_000u64)
        .map(|i| f64::from_bits(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
        .chain([0.0, -0.0, f64::NAN, f64::from_bits(0x7ff8_0000_0000_0001)])
        .collect();
    let d = Delta {
        rows: (0..40_004u32)
            .map(|i| i.wrapping_mul(2_654_435_761))
            .collect(),
        values,
        few: vec![3, 1, 4],
    };
    let bytes = encode(&d);
    // 4 and 8 bytes a value plus small headers: no per-value msgpack markers.
    assert!(bytes.len() < 40_004 * 12 + 64, "{}", bytes.len());
    for sizes in [&[1usize][..], &[1200, 7, 1, 4093], &[65_537]] {
        let chunks = chunked(&bytes, sizes);
        let skeleton = Skeleton::scan(&chunks, bytes.len()).unwrap();
        // Both large fields are elided and taken; the short one stays inline.
        assert_eq!(skeleton.elided.len(), 2);
        let fast: Delta = skeleton.decode(&chunks).unwrap();
        let back: Delta = Body::from_chunks(chunks).decode("delta").unwrap();
        for got in [&fast, &back] {
            assert_eq!(got.rows, d.rows);
            assert_eq!(got.few, d.few);
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got.values), bits(&d.values));
        }
    }
    // A payload that is not whole values is an error, chunked or not.
    let empty = Delta {
        rows: Vec::new(),
        values: Vec::new(),
        few: Vec::new(),
    };
    let mut odd = with_bin32(encode(&empty), b"values", 80_004);
    odd.extend(encode(&"few"));
    odd.extend(encode(&serde_bytes::Bytes::new(&[])));
    let whole = crate::decode_body::<Delta>("delta", &odd).unwrap_err();
    assert!(whole.to_string().contains("not a multiple of 8"), "{whole}");
    let chunked_err = Body::from_chunks(chunked(&odd, &[4096, 13]))
        .decode::<Delta>("delta")
        .unwrap_err();
    assert_eq!(chunked_err, whole);
}

/// `body` cut after the key `field`, then a bin32 of `len` zero bytes as its value.
fn with_bin32(mut body: Vec<u8>, field: &[u8], len: u32) -> Vec<u8> {
    let at = body.windows(field.len()).position(|w| w == field).unwrap() + field.len();
    body.truncate(at);
    body.push(0xc6);
    body.extend_from_slice(&len.to_be_bytes());
    body.extend(std::iter::repeat_n(0u8, len as usize));
    body
}

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct Mixed {
    #[serde(with = "serde_bytes")]
    raw: Vec<u8>,
    a: Tensor,
    b: Option<Tensor>,
    name: String,
}

#[test]
fn a_large_byte_field_falls_back_to_the_gathered_decode() {
    let m = Mixed {
        raw: (0..200_000u32).map(|i| (i % 251) as u8).collect(),
        a: Tensor::from_vec((0..70_000).map(|i| i as f32).collect()),
        b: Some(Tensor::from_vec(vec![-1.5; 40_000])),
        name: "x".repeat(100_000),
    };
    let bytes = encode(&m);
    let chunks = chunked(&bytes, &[1452, 999]);
    let skeleton = Skeleton::scan(&chunks, bytes.len()).unwrap();
    assert_eq!(skeleton.elided.len(), 3);
    // `raw` saw a token, not its bytes: the fast path refuses its own result.
    assert!(skeleton.decode::<Mixed>(&chunks).is_none());
    let back: Mixed = Body::from_chunks(chunks).decode("mixed").unwrap();
    assert_eq!(back, m);
}

#[test]
fn bad_bodies_are_the_same_errors_as_gathered() {
    let bytes = encode(&Blob {
        tensor: Tensor::from_vec(vec![1.0; 50_000]),
        step: 1,
    });
    // Cut short, and one byte of payload too many (not a multiple of 4).
    let cut = &bytes[..bytes.len() - 9];
    let chunked_err = Body::from_chunks(chunked(cut, &[1000]))
        .decode::<Blob>("blob")
        .unwrap_err();
    let whole_err = crate::decode_body::<Blob>("blob", cut).unwrap_err();
    assert_eq!(chunked_err, whole_err);
    let empty = Blob {
        tensor: Tensor::from_vec(vec![]),
        step: 1,
    };
    // `data` as a bin32 of 4 * 20_000 + 1 bytes.
    let mut odd = with_bin32(encode(&empty), b"data", 80_001);
    odd.extend(encode(&"step"));
    odd.push(1);
    let chunked_err = Body::from_chunks(chunked(&odd, &[4096, 13]))
        .decode::<Blob>("blob")
        .unwrap_err();
    assert_eq!(
        chunked_err,
        crate::decode_body::<Blob>("blob", &odd).unwrap_err()
    );
}

#[test]
fn bodies_compare_by_bytes_and_slice_from_an_offset() {
    let bytes: Vec<u8> = (0..=255).collect();
    let a = Body::from_chunks(chunked(&bytes, &[5, 1, 77]));
    let b = Body::from(bytes.clone());
    assert_eq!(a, b);
    assert_eq!(a.to_bytes(), b.to_bytes());
    let tail: Vec<u8> = a.slices(100).flatten().copied().collect();
    assert_eq!(tail, bytes[100..]);
    assert!(Body::from_chunks(vec![Bytes::new()]).is_empty());
}

proptest! {
    #[test]
    fn random_values_and_chunkings_round_trip(
        values in proptest::collection::vec(any::<u32>(), 16_384..20_000),
        sizes in proptest::collection::vec(1usize..5000, 1..8),
        step in any::<u64>(),
    ) {
        let t = Tensor::from_vec(values.iter().map(|&b| f32::from_bits(b)).collect());
        let bytes = encode(&Blob { tensor: t, step });
        let back: Blob = Body::from_chunks(chunked(&bytes, &sizes)).decode("blob").unwrap();
        prop_assert_eq!(bits(&back.tensor.data), values);
        prop_assert_eq!(back.step, step);
    }

    #[test]
    fn garbage_never_panics(
        data in proptest::collection::vec(any::<u8>(), 0..70_000),
        sizes in proptest::collection::vec(1usize..3000, 1..5),
    ) {
        let body = Body::from_chunks(chunked(&data, &sizes));
        let chunked_result = body.decode::<Blob>("blob");
        prop_assert_eq!(chunked_result.ok(), crate::decode_body::<Blob>("blob", &data).ok());
    }
}

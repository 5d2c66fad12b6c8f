use super::*;
use proptest::prelude::*;

fn header() -> EnvelopeHeader {
    EnvelopeHeader {
        from: NodeId(1),
        to: NodeId(2),
        actor: "shard-0".into(),
        msg_type: "t".into(),
        priority: Priority(7),
        kind: EnvelopeKind::Ask { request_id: 9 },
    }
}

#[test]
fn round_trip() {
    let bytes = Frame::encode(&header(), &vec![1u32, 2, 3]).unwrap();
    let f = Frame::decode(bytes, 1 << 20).unwrap();
    assert_eq!(f.header, header());
    let v: Vec<u32> = f.body.decode("t").unwrap();
    assert_eq!(v, vec![1, 2, 3]);
}

#[test]
fn encode_allocates_the_exact_frame_size() {
    let body = crate::Tensor::from_vec(vec![1.5; 100_000]);
    let bytes = Frame::encode(&header(), &body).unwrap();
    let prefix = FramePrefix::parse(&bytes, usize::MAX).unwrap();
    assert_eq!(prefix.total_len(), bytes.len());
    let f = Frame::decode(bytes, usize::MAX).unwrap();
    let back: crate::Tensor = f.body.decode("t").unwrap();
    assert_eq!(back, body);
    assert_eq!(crate::encoded_len(&body).unwrap(), f.body.len());
}

#[test]
fn oversize_rejected_from_prefix() {
    let bytes = Frame::encode(&header(), &vec![0u8; 1000]).unwrap();
    let err = FramePrefix::parse(&bytes[..FRAME_PREFIX_LEN], 100).unwrap_err();
    assert!(matches!(err, CodecError::Oversize { .. }));
}

#[test]
fn truncation_and_magic() {
    let bytes = Frame::encode(&header(), &"x").unwrap();
    let cut = bytes.slice(..bytes.len() - 1);
    assert!(matches!(
        Frame::decode(cut, 1 << 20),
        Err(CodecError::Truncated { .. })
    ));
    let mut bad = bytes.to_vec();
    bad[0] = b'X';
    assert!(matches!(
        Frame::decode(Bytes::from(bad), 1 << 20),
        Err(CodecError::BadMagic(_))
    ));
}

#[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
struct Blob {
    step: u64,
    tensor: crate::Tensor,
    note: String,
}

crate::remote_message!(Blob => (), "test.blob", payload = tensor.data);

/// Names a vector that is not serialized: the encoder must notice and copy as usual.
#[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
struct Liar {
    #[serde(skip)]
    hidden: Vec<f32>,
    #[serde(with = "crate::tensor::f32_bytes")]
    shown: Vec<f32>,
}

impl crate::RemoteMessage for Liar {
    const TYPE_NAME: &'static str = "test.liar";
    type Reply = ();
    fn large_payload(&mut self) -> Option<&mut Vec<f32>> {
        Some(&mut self.hidden)
    }
}

fn joined(pieces: &[Bytes]) -> Vec<u8> {
    pieces.iter().flat_map(|p| p.iter().copied()).collect()
}

#[test]
fn chunked_encoding_is_byte_identical_and_keeps_the_tensors_own_buffer() {
    let values: Vec<f32> = (0..=u16::MAX)
        .map(|i| f32::from_bits(u32::from(i) << 16 | 0x1234))
        .collect();
    let blob = Blob {
        step: 42,
        tensor: crate::Tensor::from_vec(values),
        note: "after the payload".into(),
    };
    let whole = Frame::encode(&header(), &blob).unwrap();
    let sent = blob.clone();
    let buffer = sent.tensor.data.as_ptr() as usize;
    let pieces = Frame::encode_chunks(&header(), sent).unwrap();
    assert_eq!(joined(&pieces), whole.to_vec());
    // Head, the tensor's own allocation (not a copy), the rest.
    assert_eq!(pieces.len(), 3);
    assert_eq!(pieces[1].as_ptr() as usize, buffer);
    assert_eq!(pieces[1].len(), blob.tensor.data.len() * 4);
    let f = Frame::decode(Bytes::from(joined(&pieces)), usize::MAX).unwrap();
    let back: Blob = f.body.decode("blob").unwrap();
    let bits = |t: &crate::Tensor| t.data.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert!(bits(&back.tensor) == bits(&blob.tensor));
    assert_eq!((back.step, back.note), (blob.step, blob.note));
}

#[test]
fn a_frame_around_an_encoded_body_is_byte_identical_and_shares_it() {
    let blob = Blob {
        step: 7,
        tensor: crate::Tensor::from_vec((0..50_000).map(|i| i as f32).collect()),
        note: "shared".into(),
    };
    let mut body = Vec::new();
    crate::encode_body(&blob, &mut body).unwrap();
    let body = Bytes::from(body);
    let pieces = Frame::with_encoded_body(&header(), &body).unwrap();
    assert_eq!(
        joined(&pieces),
        Frame::encode(&header(), &blob).unwrap().to_vec()
    );
    // The body piece is the caller's buffer, not a copy.
    assert_eq!(pieces[1].as_ptr(), body.as_ptr());
}

#[test]
fn a_large_raw_body_is_a_piece_of_its_own_and_a_small_one_is_joined() {
    let body: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let whole = Frame::encode_raw(&header(), &body).unwrap();
    let buffer = body.as_ptr() as usize;
    let pieces = Frame::encode_raw_chunks(&header(), body).unwrap();
    assert_eq!(joined(&pieces), whole.to_vec());
    assert_eq!(pieces.len(), 2);
    assert_eq!(pieces[1].as_ptr() as usize, buffer);
    let small = vec![7u8; 100];
    let pieces = Frame::encode_raw_chunks(&header(), small.clone()).unwrap();
    assert_eq!(pieces, vec![Frame::encode_raw(&header(), &small).unwrap()]);
}

#[test]
fn chunked_encoding_falls_back_to_one_buffer_when_it_cannot_take_the_payload() {
    let small = Blob {
        step: 1,
        tensor: crate::Tensor::from_vec(vec![1.0; 100]),
        note: String::new(),
    };
    let pieces = Frame::encode_chunks(&header(), small.clone()).unwrap();
    assert_eq!(pieces.len(), 1);
    assert_eq!(pieces[0], Frame::encode(&header(), &small).unwrap());
    let liar = Liar {
        hidden: vec![2.0; 100_000],
        shown: vec![3.0; 100_000],
    };
    let pieces = Frame::encode_chunks(&header(), liar.clone()).unwrap();
    assert_eq!(pieces.len(), 1);
    assert_eq!(pieces[0], Frame::encode(&header(), &liar).unwrap());
}

/// Serializes its vector, then panics.
#[derive(Deserialize)]
struct Boom {
    data: Vec<f32>,
}

impl Serialize for Boom {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let _ = crate::tensor::f32_bytes::serialize(&self.data, s);
        panic!("boom");
    }
}

impl crate::RemoteMessage for Boom {
    const TYPE_NAME: &'static str = "test.boom";
    type Reply = ();
    fn large_payload(&mut self) -> Option<&mut Vec<f32>> {
        Some(&mut self.data)
    }
}

#[test]
fn a_panicking_serializer_leaves_no_payload_behind() {
    let boom = Boom {
        data: vec![9.0; 50_000],
    };
    assert!(std::panic::catch_unwind(|| Frame::encode_chunks(&header(), boom)).is_err());
    // The next frame (an empty vector, possibly at the same address) is its own.
    let empty = crate::Tensor::from_vec(vec![]);
    let whole = Frame::encode(&header(), &empty).unwrap();
    let f = Frame::decode(whole, usize::MAX).unwrap();
    let back: crate::Tensor = f.body.decode("t").unwrap();
    assert!(back.data.is_empty());
    assert!(TAKEN.with(|t| t.borrow().is_none()));
}

#[test]
fn a_frame_from_odd_sized_chunks_decodes_like_a_whole_one() {
    let body = crate::Tensor::from_vec((0..100_000).map(|i| i as f32 * 0.5).collect());
    let bytes = Frame::encode(&header(), &body).unwrap();
    let prefix = FramePrefix::parse(&bytes, usize::MAX).unwrap();
    let whole = Frame::decode(bytes.clone(), usize::MAX).unwrap();
    for step in [1usize, 3, 1451, 65_521] {
        let chunks: Vec<Bytes> = bytes[FRAME_PREFIX_LEN..]
            .chunks(step)
            .map(Bytes::copy_from_slice)
            .collect();
        let f = Frame::from_chunks(prefix, chunks).unwrap();
        assert_eq!(f.header, whole.header);
        assert_eq!(f.body, whole.body);
        let back: crate::Tensor = f.body.decode("t").unwrap();
        assert_eq!(back, body);
    }
    let rest = bytes.slice(FRAME_PREFIX_LEN..);
    let cut = vec![rest.slice(..rest.len() - 1)];
    assert!(matches!(
        Frame::from_chunks(prefix, cut),
        Err(CodecError::Truncated { .. })
    ));
    let long = vec![rest.clone(), Bytes::from_static(b"x")];
    assert!(matches!(
        Frame::from_chunks(prefix, long),
        Err(CodecError::Header(_))
    ));
}

proptest! {
    #[test]
    fn garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = Frame::decode(Bytes::from(data.clone()), 1 << 16);
        let mut framed = FRAME_MAGIC.to_vec();
        framed.extend_from_slice(&data);
        let _ = Frame::decode(Bytes::from(framed), 1 << 16);
    }
}

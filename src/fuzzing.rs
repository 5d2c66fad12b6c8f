//! Entry points for the fuzzers in `fuzz/` and the regression tests that replay their findings:
//! each feeds outside bytes to a decoder, which must never panic, hang or allocate without bound.

use petrel_messages::runtime::{BarrierEnter, Heartbeat, Join, PeerDown, Shutdown};
use petrel_messages::{Frame, RemoteMessage, Tensor, decode_body};
use std::path::Path;

/// A decoder entry point.
pub type Target = fn(&[u8]);

/// Every target, by name: the same names as the fuzz targets and regression folders.
pub const TARGETS: &[(&str, Target)] = &[
    ("frame", frame),
    ("wire_messages", wire_messages),
    ("libsvm", libsvm),
    ("ratings", ratings),
    ("bag_of_words", bag_of_words),
    ("idx", idx),
    ("model_profile", model_profile),
    ("config", config),
    ("ps_row", ps_row),
    ("system_messages", system_messages),
];

/// Frame prefix, lane header and envelope header decoding, as the receive path does.
pub fn frame(data: &[u8]) {
    if data.len() >= petrel_net::sequencer::LANE_HEADER_LEN {
        let mut lane = [0u8; petrel_net::sequencer::LANE_HEADER_LEN];
        lane.copy_from_slice(&data[..petrel_net::sequencer::LANE_HEADER_LEN]);
        let _ = petrel_net::sequencer::LaneHeader::decode(&lane);
    }
    let _ = petrel_messages::envelope::FramePrefix::parse(data, 1 << 20);
    let _ = Frame::decode(bytes::Bytes::copy_from_slice(data), 1 << 20);
}

fn body<M: RemoteMessage>(data: &[u8]) {
    let _ = decode_body::<M>(M::TYPE_NAME, data);
}

/// Every runtime wire type and the tensor payload.
pub fn wire_messages(data: &[u8]) {
    body::<Join>(data);
    body::<Heartbeat>(data);
    body::<PeerDown>(data);
    body::<Shutdown>(data);
    body::<BarrierEnter>(data);
    body::<petrel_messages::runtime::Leave>(data);
    body::<petrel_messages::runtime::MembershipView>(data);
    body::<petrel_messages::runtime::DrainAndLeave>(data);
    let _ = decode_body::<petrel_messages::runtime::BarrierReply>("barrier-reply", data);
    let _ = decode_body::<petrel_messages::runtime::JoinAck>("join-ack", data);
    if let Ok(t) = decode_body::<Tensor>("tensor", data) {
        let _ = t.validate();
    }
    // As a stream delivers it: in chunks, decoded without gathering.
    let chunks = data.chunks(7).map(bytes::Bytes::copy_from_slice).collect();
    if let Ok(t) = petrel_messages::Body::from_chunks(chunks).decode::<Tensor>("tensor") {
        let _ = t.validate();
    }
}

/// Loader limits that keep what the apps allocate from a parsed input cheap.
const FUZZ_LIMITS: petrel_ml::data::DataLimits = petrel_ml::data::DataLimits {
    max_dimension: 1 << 20,
    max_documents: 1 << 20,
    max_tokens: 1 << 22,
};

/// LIBSVM text, and the column-major copy every app builds (sized by the largest index).
pub fn libsvm(data: &[u8]) {
    let _ = petrel_ml::data::libsvm::parse_libsvm(data, "fuzz.libsvm");
    if let Ok(dataset) =
        petrel_ml::data::parse_libsvm_with_limits(data, "fuzz.libsvm", &FUZZ_LIMITS)
    {
        let _ = dataset.to_columns();
    }
}

/// Rating triplets and Matrix Market text, and the counts sized by their dimensions.
pub fn ratings(data: &[u8]) {
    if let Ok(r) = petrel_ml::data::ratings::parse_triplets(data, "fuzz.data") {
        let _ = (r.user_counts(), r.item_counts());
    }
    let _ = petrel_ml::data::ratings::parse_matrix_market(data, "fuzz.mtx");
    if let Ok(r) = petrel_ml::data::parse_matrix_market_with_limits(data, "fuzz.mtx", &FUZZ_LIMITS)
    {
        let _ = (r.user_counts(), r.item_counts());
    }
}

/// UCI bag-of-words docword and vocabulary files, and the word-frequency table sized by W.
pub fn bag_of_words(data: &[u8]) {
    let _ = petrel_ml::data::bow::parse_docword(data, "docword.fuzz.txt");
    if let Ok(corpus) =
        petrel_ml::data::parse_docword_with_limits(data, "docword.fuzz.txt", &FUZZ_LIMITS)
    {
        let _ = corpus.word_frequencies();
    }
    let _ = petrel_ml::data::bow::parse_vocab(data, "vocab.fuzz.txt");
}

/// IDX (MNIST) image and label files.
pub fn idx(data: &[u8]) {
    let _ = petrel_ml::dnn::data::parse_idx_images(data, Path::new("fuzz-images.idx"));
    let _ = petrel_ml::dnn::data::parse_idx_labels(data, Path::new("fuzz-labels.idx"));
}

/// P3 model profiles (TOML and JSON).
pub fn model_profile(data: &[u8]) {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = petrel_p3::core::profile::ModelProfile::from_toml_str(s, "fuzz.toml");
        let _ = petrel_p3::core::profile::ModelProfile::from_json_str(s, "fuzz.json");
    }
}

/// Cluster settings (TOML).
pub fn config(data: &[u8]) {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = petrel_actors::Settings::from_toml(s);
    }
}

/// A parameter-server row as stored in checkpoints.
pub fn ps_row(data: &[u8]) {
    let _ = petrel_ps::core::types::Row::decode(data);
}

/// The wire types of the three systems and the demo.
pub fn system_messages(data: &[u8]) {
    use petrel_ps::shells::{ShardState, ToClient, ToShard};
    use petrel_strads::apps::{lasso::LassoApp, lda::LdaApp, logistic::LogisticApp, mf::MfApp};
    use petrel_strads::shells::{Commit, Dispatch, PartialResult, StradsApp};

    fn strads<A: StradsApp>(data: &[u8]) {
        body::<Dispatch<A>>(data);
        body::<Commit<A>>(data);
        let _ = decode_body::<PartialResult<A>>("strads-partial", data);
    }

    body::<ToShard>(data);
    body::<ToClient>(data);
    body::<petrel_ps::shells::ShardQuery>(data);
    let _ = decode_body::<ShardState>("shard-state", data);
    body::<petrel_p3::shells::PushGrad>(data);
    body::<petrel_p3::shells::InitSlice>(data);
    let _ = decode_body::<petrel_p3::shells::SliceValues>("p3-slice", data);
    body::<crate::demo::Contribution>(data);
    let _ = decode_body::<crate::demo::RoundMean>("demo-mean", data);
    body::<petrel_ps::WorkerDone>(data);
    strads::<LassoApp>(data);
    strads::<LogisticApp>(data);
    strads::<petrel_strads::apps::logistic::gs::LogisticGsApp>(data);
    strads::<MfApp>(data);
    strads::<LdaApp>(data);
    body::<petrel_strads::shells::Handoff<MfApp>>(data);
    body::<petrel_strads::shells::Handoff<LdaApp>>(data);
}

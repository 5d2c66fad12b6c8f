//! Data and optimiser pieces of data-parallel DNN training (f32, CPU).
//!
//! The networks themselves are written with candle (`petrel_p3::models::nets`); what
//! lives here is what the parameter side needs without a framework: [`FlatSgdMomentum`]
//! updates flat tensors (or slices of them, as a P3 server shard does), [`data`] has the
//! [`data::Dataset`] type, synthetic generators and the IDX (MNIST) reader, [`cifar`] the
//! CIFAR-10 binary reader. Loaders fail with a [`data::DnnDataError`] naming the file;
//! the optimiser with a [`DnnError`].

pub mod cifar;
pub mod data;
pub mod optim;

pub use optim::FlatSgdMomentum;

/// The array crate [`data::Dataset`] uses, so code that builds inputs or writes its own
/// stage model by hand (see `examples/p3_custom.rs`) names the same version.
pub use ndarray;

/// Errors of the optimiser: caller mistakes (tensors of different lengths or counts),
/// never internal invariants.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DnnError {
    /// A flat parameter / gradient / velocity had the wrong number of elements.
    #[error("parameter tensor {index} ({name}): expected {expected} elements, got {got}")]
    ParamLength {
        /// The tensor's index in the network.
        index: usize,
        /// The tensor's name.
        name: String,
        /// Its element count.
        expected: usize,
        /// The elements given.
        got: usize,
    },
}

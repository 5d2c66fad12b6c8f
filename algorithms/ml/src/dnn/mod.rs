//! Data and optimiser pieces of data-parallel DNN training (the networks are candle's, in
//! `petrel_p3`): [`FlatSgdMomentum`] over flat tensors or slices, [`data`] (data sets,
//! generators, IDX) and [`cifar`] (CIFAR-10 binary).

pub mod cifar;
pub mod data;
pub mod optim;

pub use optim::FlatSgdMomentum;

/// The array crate [`data::Dataset`] uses.
pub use ndarray;

/// Errors of the optimiser: caller mistakes (tensors of different lengths).
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

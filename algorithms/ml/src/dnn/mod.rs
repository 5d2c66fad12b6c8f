//! Data and optimiser pieces of data-parallel DNN training (the networks are candle's, in
//! `petrel_p3`): [`FlatSgdMomentum`] over flat tensors or slices, [`data`] (data sets,
//! generators, IDX) and [`cifar`] (CIFAR-10 binary).

pub mod cifar;
pub mod data;
pub mod optim;

pub use optim::FlatSgdMomentum;

/// The array crate [`data::Dataset`] uses.
pub use ndarray;

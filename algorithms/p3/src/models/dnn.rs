//! [`DnnStageModel`]: a [`Sequential`] network as a [`StageModel`].

use std::ops::Range;
use std::time::Duration;

use ndarray::{ArrayD, Ix2};
use petrel_ml::dnn::data::Dataset;
use petrel_ml::dnn::{Sequential, SoftmaxCrossEntropy};

use crate::kit::{StageGrads, StageModel, StepStats};
use crate::models::ModelError;

/// A real network trained stage by stage: stage = network layer, tensors = the layer's
/// parameter tensors. Worker `w` of `n` takes rows `[(iter * n + w) * batch, ..)`
/// (wrapping) of its data set.
pub struct DnnStageModel {
    net: Sequential,
    ranges: Vec<Range<usize>>,
    data: Dataset,
    batch: usize,
    worker: usize,
    n_workers: usize,
    act: Option<ArrayD<f32>>,
    labels: Vec<usize>,
    grad: Option<ArrayD<f32>>,
    last: Option<StepStats>,
}

impl DnnStageModel {
    /// Worker `worker` of `n_workers` training `net` on `data` in batches of `batch`.
    pub fn new(
        net: Sequential,
        data: Dataset,
        batch: usize,
        worker: usize,
        n_workers: usize,
    ) -> Result<Self, ModelError> {
        if data.is_empty() || batch == 0 || n_workers == 0 {
            return Err(ModelError::NothingToTrain);
        }
        Ok(DnnStageModel {
            ranges: net.layer_param_ranges(),
            net,
            data,
            batch,
            worker,
            n_workers,
            act: None,
            labels: Vec::new(),
            grad: None,
            last: None,
        })
    }

    /// `net`'s parameter tensors as a job's initial values ([`crate::kit::P3Job::new`]).
    pub fn initial(net: &Sequential) -> Vec<Vec<f32>> {
        net.params().iter().map(|p| p.to_vec()).collect()
    }
}

impl StageModel for DnnStageModel {
    type Error = ModelError;

    fn stage_tensors(&self) -> Vec<Vec<u64>> {
        let counts = self.net.param_counts();
        self.ranges
            .iter()
            .map(|r| counts[r.clone()].to_vec())
            .collect()
    }

    fn set_tensor(&mut self, tensor: usize, values: &[f32]) -> Result<(), ModelError> {
        let mut params = self.net.params_mut();
        let dst = params.get_mut(tensor).ok_or(ModelError::NoTensor(tensor))?;
        if dst.len() != values.len() {
            return Err(ModelError::TensorLength {
                tensor,
                expected: dst.len(),
                got: values.len(),
            });
        }
        dst.copy_from_slice(values);
        Ok(())
    }

    fn forward_stage(&mut self, iter: u64, stage: usize) -> Result<Duration, ModelError> {
        if stage == 0 {
            let n = self.data.len();
            let start = (iter as usize * self.n_workers + self.worker) * self.batch;
            let idx: Vec<usize> = (0..self.batch).map(|i| (start + i) % n).collect();
            let (x, y) = self.data.select(&idx);
            self.act = Some(x);
            self.labels = y;
        }
        let x = self.act.take().ok_or(ModelError::OutOfOrder {
            stage,
            what: "forward without input",
        })?;
        let layer = self
            .net
            .layer_mut(stage)
            .ok_or(ModelError::NoStage(stage))?;
        let out = layer.forward(&x)?;
        if stage + 1 == self.ranges.len() {
            let logits = out
                .into_dimensionality::<Ix2>()
                .map_err(ModelError::Logits)?;
            let (loss, accuracy) =
                SoftmaxCrossEntropy::loss_and_accuracy(&logits.view(), &self.labels)?;
            let (_, g) = SoftmaxCrossEntropy::loss_and_grad(&logits.view(), &self.labels)?;
            self.last = Some(StepStats { loss, accuracy });
            self.grad = Some(g.into_dyn());
        } else {
            self.act = Some(out);
        }
        Ok(Duration::ZERO)
    }

    fn backward_stage(&mut self, stage: usize) -> Result<StageGrads, ModelError> {
        let g = self.grad.take().ok_or(ModelError::OutOfOrder {
            stage,
            what: "backward without gradient",
        })?;
        let layer = self
            .net
            .layer_mut(stage)
            .ok_or(ModelError::NoStage(stage))?;
        self.grad = Some(layer.backward(&g)?);
        let grads = layer.grads().iter().map(|g| g.to_vec()).collect();
        Ok(StageGrads {
            grads,
            compute: Duration::ZERO,
        })
    }

    fn stats(&self) -> Option<StepStats> {
        self.last
    }
}

// Over 600 lines: the candle adapter's init, stage building and StageModel impl share types.
//! [`CandleStageModel`]: a candle model given as an ordered list of stages, trained by P3.
//!
//! # The adapter
//! A [`StagedNet`] is the user's model: stages in forward order, each built from a
//! [`VarBuilder`] the usual candle way. The adapter learns each stage's parameter tensors
//! (name, shape) from the builder calls; they become the stage's P3 tensors (sorted by name).
//!
//! - **Forward.** Stage `k` is rebuilt from its own tensors the first time it runs after one
//!   changed, so a stage needs only its own parameters, as P3's per-layer readiness asks.
//! - **Backward.** Every stage's input is a detached leaf, so each stage has its own graph.
//!   Stage `k < n-1` is seeded with its output's gradient through `SeedGradient`, a custom
//!   op whose backward hands the gradient on unchanged (cheaper than `sum(out * g)`). The
//!   result is candle's whole-model arithmetic (`stagewise_gradients_match_whole_model_backward`).
//! - **Copies.** A pulled tensor is copied once, into a fresh candle `Var`'s storage.
//!
//! # Initial values
//! candle's CPU generator cannot be seeded, yet every node must start from the same
//! parameters: [`StagedNet::init`] builds every stage from a backend that honours each
//! tensor's [`Init`] hint with a ChaCha generator keyed by the seed, stage and tensor name.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use candle_core::backprop::GradStore;
use candle_core::{CpuStorage, CustomOp1, D, DType, Device, Layout, ModuleT, Shape, Tensor, Var};
use candle_nn::VarBuilder;
use candle_nn::init::{Init, NormalOrUniform};
use candle_nn::var_builder::SimpleBackend;
use petrel_ml::dnn::data::Dataset;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal, Uniform};

use crate::error::P3Error;
use crate::kit::{StageGrads, StageModel, StepStats};

/// Builds one stage's module from a [`VarBuilder`].
pub type BuildStage =
    dyn Fn(VarBuilder) -> candle_core::Result<Box<dyn ModuleT>> + Send + Sync + 'static;

/// A parameter tensor of a stage, as the stage's builder asked for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpec {
    /// Name within the stage (`weight`, `conv1.bias`, …).
    pub name: String,
    /// Shape.
    pub shape: Vec<usize>,
}

impl TensorSpec {
    /// Number of parameters.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether `values` fit this spec, as tensor `t` of the model.
    fn check(&self, t: usize, values: &[f32]) -> Result<(), P3Error> {
        if values.len() != self.len() {
            return Err(P3Error::TensorLength {
                tensor: t,
                expected: self.len(),
                got: values.len(),
            });
        }
        Ok(())
    }

    /// True for a tensor without elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Every stage's parameter tensors, forward order.
pub type StageSpecs = Vec<Vec<TensorSpec>>;

/// A candle model as an ordered list of stages (see the [module docs](self)).
#[derive(Clone)]
pub struct StagedNet {
    name: String,
    input: Vec<usize>,
    stages: Vec<(String, Arc<BuildStage>)>,
}

impl std::fmt::Debug for StagedNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StagedNet")
            .field("name", &self.name)
            .field("input", &self.input)
            .field(
                "stages",
                &self.stages.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl StagedNet {
    /// An empty model named `name` taking examples of shape `input` (without the batch
    /// axis, e.g. `[3, 32, 32]`).
    pub fn new(name: &str, input: &[usize]) -> Self {
        StagedNet {
            name: name.into(),
            input: input.to_vec(),
            stages: Vec::new(),
        }
    }

    /// Appends a stage built by `build` (called whenever the stage's parameters change).
    pub fn stage<M, F>(mut self, name: &str, build: F) -> Self
    where
        M: ModuleT + 'static,
        F: Fn(VarBuilder) -> candle_core::Result<M> + Send + Sync + 'static,
    {
        let build: Arc<BuildStage> =
            Arc::new(move |vb: VarBuilder| build(vb).map(|m| Box::new(m) as Box<dyn ModuleT>));
        self.stages.push((name.into(), build));
        self
    }

    /// The model's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Shape of one example.
    pub fn input_shape(&self) -> &[usize] {
        &self.input
    }

    /// Number of stages.
    pub fn n_stages(&self) -> usize {
        self.stages.len()
    }

    /// Every stage's parameter tensors (sorted by name) and the seeded initial values of
    /// every tensor, forward order (see the [module docs](self#initial-values)).
    pub fn init(&self, seed: u64) -> Result<(StageSpecs, Vec<Vec<f32>>), P3Error> {
        let mut specs = Vec::with_capacity(self.stages.len());
        let mut values = Vec::new();
        for (k, (_, build)) in self.stages.iter().enumerate() {
            let backend = SeededInit {
                seed: seed ^ (k as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
                made: Mutex::new(BTreeMap::new()),
            };
            let vb = VarBuilder::from_backend(Box::new(&backend), DType::F32, Device::Cpu);
            build(vb)?;
            // By name: a BTreeMap iterates sorted.
            let made = backend.made.into_inner().unwrap_or_default();
            let mut stage = Vec::with_capacity(made.len());
            for (name, (shape, v)) in made {
                stage.push(TensorSpec { name, shape });
                values.push(v);
            }
            specs.push(stage);
        }
        Ok((specs, values))
    }

    /// Every stage's parameter tensors, forward order (see [`StagedNet::init`]).
    pub fn specs(&self) -> Result<Vec<Vec<TensorSpec>>, P3Error> {
        Ok(self.init(0)?.0)
    }

    /// Every parameter tensor, forward order, under its whole-model name: the stage's name, a dot,
    /// the tensor's name within the stage (`dense0.weight`, `layer1.0.conv1.bias`). These are the
    /// names [`StagedNet::build`] asks its `VarBuilder` for, and those of the saved model file.
    pub fn named_specs(&self) -> Result<Vec<TensorSpec>, P3Error> {
        let specs = self.specs()?;
        Ok(self
            .stages
            .iter()
            .zip(specs)
            .flat_map(|((stage, _), tensors)| {
                tensors.into_iter().map(move |t| TensorSpec {
                    name: format!("{stage}.{}", t.name),
                    shape: t.shape,
                })
            })
            .collect())
    }

    /// The whole network from one `VarBuilder` holding every tensor under its
    /// [`named_specs`](StagedNet::named_specs) name, e.g.
    /// `VarBuilder::from_mmaped_safetensors` over a saved model file.
    pub fn build(&self, vb: VarBuilder) -> candle_core::Result<BuiltNet> {
        let stages = self
            .stages
            .iter()
            .map(|(name, build)| build(vb.pp(name)))
            .collect::<candle_core::Result<_>>()?;
        Ok(BuiltNet { stages })
    }
}

/// A [`StagedNet`] built as one module ([`StagedNet::build`]); its forward pass is the
/// stages' in inference mode and yields the logits.
pub struct BuiltNet {
    stages: Vec<Box<dyn ModuleT>>,
}

impl std::fmt::Debug for BuiltNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuiltNet")
            .field("stages", &self.stages.len())
            .finish()
    }
}

impl candle_core::Module for BuiltNet {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.stages
            .iter()
            .try_fold(x.clone(), |x, s| s.forward_t(&x, false))
    }
}

/// A `VarBuilder` backend that makes each requested tensor from its candle [`Init`] hint
/// with a generator seeded by the stage seed and the tensor's name, and remembers it.
struct SeededInit {
    seed: u64,
    made: Mutex<BTreeMap<String, ShapedValues>>,
}

/// A tensor's shape and values.
type ShapedValues = (Vec<usize>, Vec<f32>);

fn name_seed(seed: u64, name: &str) -> u64 {
    // FNV-1a: stable across runs and platforms, unlike std's hasher.
    name.bytes().fold(seed ^ 0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn init_values(h: &Init, shape: &Shape, rng: &mut ChaCha8Rng) -> candle_core::Result<Vec<f32>> {
    let n = shape.elem_count();
    let bad = |e: &dyn std::fmt::Display| candle_core::Error::Msg(format!("init: {e}"));
    let uniform = |lo: f64, up: f64, rng: &mut ChaCha8Rng| -> candle_core::Result<Vec<f32>> {
        if lo >= up {
            return Ok(vec![lo as f32; n]);
        }
        let d = Uniform::new(lo as f32, up as f32);
        Ok((0..n).map(|_| d.sample(rng)).collect())
    };
    let normal = |mean: f64, std: f64, rng: &mut ChaCha8Rng| -> candle_core::Result<Vec<f32>> {
        let d = Normal::new(mean as f32, std as f32).map_err(|e| bad(&e))?;
        Ok((0..n).map(|_| d.sample(rng)).collect())
    };
    match h {
        Init::Const(v) => Ok(vec![*v as f32; n]),
        Init::Uniform { lo, up } => uniform(*lo, *up, rng),
        Init::Randn { mean, stdev } => normal(*mean, *stdev, rng),
        Init::Kaiming {
            dist,
            fan,
            non_linearity,
        } => {
            let fan = fan.for_shape(shape).max(1);
            let std = non_linearity.gain() / (fan as f64).sqrt();
            match dist {
                NormalOrUniform::Uniform => {
                    let bound = 3f64.sqrt() * std;
                    uniform(-bound, bound, rng)
                }
                NormalOrUniform::Normal => normal(0.0, std, rng),
            }
        }
    }
}

impl SimpleBackend for &SeededInit {
    fn get(
        &self,
        s: Shape,
        name: &str,
        h: Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        let mut made = self
            .made
            .lock()
            .map_err(|_| candle_core::Error::Msg("init backend poisoned".into()))?;
        if let Some((shape, v)) = made.get(name) {
            if shape.as_slice() != s.dims() {
                return Err(candle_core::Error::Msg(format!(
                    "tensor {name} asked as {:?} and as {shape:?}",
                    s.dims()
                )));
            }
            return Tensor::from_slice(v, s, dev)?.to_dtype(dtype);
        }
        let mut rng = ChaCha8Rng::seed_from_u64(name_seed(self.seed, name));
        let v = init_values(&h, &s, &mut rng)?;
        let t = Tensor::from_slice(&v, s.clone(), dev)?.to_dtype(dtype)?;
        made.insert(name.to_string(), (s.dims().to_vec(), v));
        Ok(t)
    }

    fn get_unchecked(&self, name: &str, _: DType, _: &Device) -> candle_core::Result<Tensor> {
        Err(candle_core::Error::Msg(format!(
            "tensor {name} asked for without a shape"
        )))
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.made
            .lock()
            .map(|m| m.contains_key(name))
            .unwrap_or(false)
    }
}

/// Seeds a stage's backward with the gradient of its output (see the [module docs](self)):
/// `out.apply_op1(SeedGradient { grad })?.backward()` back-propagates `grad` from `out`.
struct SeedGradient {
    grad: Tensor,
}

impl CustomOp1 for SeedGradient {
    fn name(&self) -> &'static str {
        "petrel-seed-gradient"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        // The value is never used: only the backward matters.
        Ok((CpuStorage::F32(vec![0.0]), Shape::from(())))
    }

    fn bwd(&self, _: &Tensor, _: &Tensor, _: &Tensor) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(self.grad.clone()))
    }
}

/// The examples and labels of rows `idx` of `data` as candle tensors.
pub fn batch_tensors(data: &Dataset, idx: &[usize]) -> Result<(Tensor, Tensor), P3Error> {
    let (x, y) = data.select(idx);
    let shape = x.shape().to_vec();
    let x = Tensor::from_vec(x.iter().copied().collect::<Vec<f32>>(), shape, &Device::Cpu)?;
    let y: Vec<u32> = y.iter().map(|&l| l as u32).collect();
    let n = y.len();
    Ok((x, Tensor::from_vec(y, n, &Device::Cpu)?))
}

/// The gradient of every one of `params` in `grads` (zeros for one without).
fn grads_of(params: &[Var], grads: &GradStore) -> Result<Vec<Vec<f32>>, P3Error> {
    let grad = |p: &Var| match grads.get(p.as_tensor()) {
        Some(g) => g.flatten_all()?.to_vec1::<f32>(),
        None => Ok(vec![0.0; p.elem_count()]),
    };
    Ok(params
        .iter()
        .map(grad)
        .collect::<candle_core::Result<_>>()?)
}

fn accuracy(logits: &Tensor, labels: &Tensor) -> candle_core::Result<f32> {
    let pred = logits.argmax(D::Minus1)?;
    let right = pred.eq(labels)?.to_dtype(DType::F32)?.mean_all()?;
    right.to_scalar::<f32>()
}

/// Runs `net` with `params` over all of `data` in batches of `batch` (inference mode),
/// handing each batch's logits, labels and size to `each`.
fn infer(
    net: &StagedNet,
    params: &[Vec<f32>],
    data: &Dataset,
    batch: usize,
    mut each: impl FnMut(&Tensor, &Tensor, usize) -> Result<(), P3Error>,
) -> Result<(), P3Error> {
    let mut map = HashMap::new();
    for (t, spec) in net.named_specs()?.into_iter().enumerate() {
        let v = params.get(t).ok_or(P3Error::NoTensor(t))?;
        spec.check(t, v)?;
        let tensor = Tensor::from_slice(v, spec.shape.as_slice(), &Device::Cpu)?;
        map.insert(spec.name, tensor);
    }
    let model = net.build(VarBuilder::from_tensors(map, DType::F32, &Device::Cpu))?;
    let idx: Vec<usize> = (0..data.len()).collect();
    for rows in idx.chunks(batch.max(1)) {
        let (x, y) = batch_tensors(data, rows)?;
        each(&candle_core::Module::forward(&model, &x)?, &y, rows.len())?;
    }
    Ok(())
}

/// Loss and accuracy of `net` with `params` on all of `data`, in batches of `batch`
/// (inference mode).
pub fn evaluate(
    net: &StagedNet,
    params: &[Vec<f32>],
    data: &Dataset,
    batch: usize,
) -> Result<StepStats, P3Error> {
    let (mut loss, mut right, mut seen) = (0.0f64, 0.0f64, 0usize);
    infer(net, params, data, batch, |x, y, n| {
        let l = candle_nn::loss::cross_entropy(x, y)?.to_scalar::<f32>()?;
        loss += f64::from(l) * n as f64;
        right += f64::from(accuracy(x, y)?) * n as f64;
        seen += n;
        Ok(())
    })?;
    let n = seen.max(1) as f64;
    Ok(StepStats {
        loss: (loss / n) as f32,
        accuracy: (right / n) as f32,
    })
}

/// Class probabilities (softmax of the logits) of every example of `data`, in order,
/// computed `batch` examples at a time with `params` (all tensors, forward order).
pub fn predict_probabilities(
    net: &StagedNet,
    params: &[Vec<f32>],
    data: &Dataset,
    batch: usize,
) -> Result<Vec<Vec<f32>>, P3Error> {
    let mut out = Vec::with_capacity(data.len());
    infer(net, params, data, batch, |x, _, _| {
        out.extend(candle_nn::ops::softmax(x, D::Minus1)?.to_vec2::<f32>()?);
        Ok(())
    })?;
    Ok(out)
}

/// One worker's [`StageModel`] over a [`StagedNet`] (see the [module docs](self)).
pub struct CandleStageModel {
    net: StagedNet,
    specs: Vec<Vec<TensorSpec>>,
    ranges: Vec<Range<usize>>,
    /// Global tensor -> (stage, index within the stage).
    owner: Vec<(usize, usize)>,
    params: Vec<Var>,
    modules: Vec<Option<Box<dyn ModuleT>>>,
    data: Arc<Dataset>,
    batch: usize,
    worker: usize,
    n_workers: usize,
    /// Per stage: its input (a variable for stages > 0) and output of this iteration.
    inputs: Vec<Option<Tensor>>,
    outputs: Vec<Option<Tensor>>,
    labels: Option<Tensor>,
    loss: Option<Tensor>,
    /// Gradient of the output of the next stage to run backward.
    grad_out: Option<Tensor>,
    last: Option<StepStats>,
}

impl CandleStageModel {
    /// Worker `worker` of `n_workers` training `net` on `data` in batches of `batch`, from
    /// `initial` (one vector per tensor, forward order; [`StagedNet::init`]).
    pub fn new(
        net: StagedNet,
        initial: &[Vec<f32>],
        data: Arc<Dataset>,
        batch: usize,
        worker: usize,
        n_workers: usize,
    ) -> Result<Self, P3Error> {
        if data.is_empty() || batch == 0 || n_workers == 0 {
            return Err(P3Error::NothingToTrain);
        }
        let specs = net.specs()?;
        let mut ranges = Vec::with_capacity(specs.len());
        let mut owner = Vec::new();
        let mut params = Vec::new();
        for (k, stage) in specs.iter().enumerate() {
            let start = owner.len();
            for (i, spec) in stage.iter().enumerate() {
                let t = owner.len();
                let v = initial.get(t).ok_or(P3Error::NoTensor(t))?;
                params.push(Self::var(t, spec, v)?);
                owner.push((k, i));
            }
            ranges.push(start..owner.len());
        }
        if params.len() != initial.len() {
            return Err(P3Error::NoTensor(params.len()));
        }
        let n = specs.len();
        Ok(CandleStageModel {
            net,
            specs,
            ranges,
            owner,
            params,
            modules: (0..n).map(|_| None).collect(),
            data,
            batch,
            worker,
            n_workers,
            inputs: vec![None; n],
            outputs: vec![None; n],
            labels: None,
            loss: None,
            grad_out: None,
            last: None,
        })
    }

    /// The one copy of a pulled tensor: into the storage of a new candle variable.
    fn var(t: usize, spec: &TensorSpec, values: &[f32]) -> Result<Var, P3Error> {
        spec.check(t, values)?;
        Ok(Var::from_vec(
            values.to_vec(),
            spec.shape.as_slice(),
            &Device::Cpu,
        )?)
    }

    fn module(&mut self, stage: usize) -> Result<&dyn ModuleT, P3Error> {
        let slot = self.modules.get_mut(stage).ok_or(P3Error::NoStage(stage))?;
        if slot.is_none() {
            let map: HashMap<String, Tensor> = self.specs[stage]
                .iter()
                .zip(&self.params[self.ranges[stage].clone()])
                .map(|(s, v)| (s.name.clone(), v.as_tensor().clone()))
                .collect();
            let vb = VarBuilder::from_tensors(map, DType::F32, &Device::Cpu);
            *slot = Some((self.net.stages[stage].1)(vb)?);
        }
        slot.as_deref().ok_or(P3Error::NoStage(stage))
    }

    /// This worker's rows of iteration `iter`: `[(iter * n_workers + worker) * batch, ..)`
    /// wrapping around the data set, so the workers of one iteration together take
    /// `n_workers * batch` consecutive rows.
    fn rows(&self, iter: u64) -> Vec<usize> {
        let start = (iter as usize * self.n_workers + self.worker) * self.batch;
        let len = self.data.len().max(1);
        (0..self.batch).map(|i| (start + i) % len).collect()
    }

    /// The gradients of every tensor from candle's own whole-model backward (one graph
    /// through all stages, one `loss.backward()`) on iteration `iter`'s batch, with the
    /// current parameters: the reference the stage-wise backward is checked against. With
    /// them, the time of the forward pass (module rebuilds included) and of the backward
    /// pass (gradients copied out included).
    pub fn whole_model_pass(
        &mut self,
        iter: u64,
    ) -> Result<(Vec<Vec<f32>>, Duration, Duration), P3Error> {
        let start = Instant::now();
        let (mut x, y) = batch_tensors(&self.data, &self.rows(iter))?;
        for stage in 0..self.ranges.len() {
            x = self.module(stage)?.forward_t(&x, true)?;
        }
        let loss = candle_nn::loss::cross_entropy(&x, &y)?;
        let forward = start.elapsed();
        let start = Instant::now();
        let out = grads_of(&self.params, &loss.backward()?)?;
        Ok((out, forward, start.elapsed()))
    }

    /// Current values of every tensor, forward order.
    pub fn params(&self) -> Result<Vec<Vec<f32>>, P3Error> {
        self.params
            .iter()
            .map(|p| Ok(p.as_tensor().flatten_all()?.to_vec1::<f32>()?))
            .collect()
    }
}

impl StageModel for CandleStageModel {
    type Error = P3Error;

    fn stage_tensors(&self) -> Vec<Vec<u64>> {
        self.specs
            .iter()
            .map(|s| s.iter().map(|t| t.len() as u64).collect())
            .collect()
    }

    fn set_tensor(&mut self, tensor: usize, values: &[f32]) -> Result<(), P3Error> {
        let &(stage, i) = self.owner.get(tensor).ok_or(P3Error::NoTensor(tensor))?;
        self.params[tensor] = Self::var(tensor, &self.specs[stage][i], values)?;
        self.modules[stage] = None;
        Ok(())
    }

    fn set_rank(&mut self, rank: usize, of: usize) {
        self.worker = rank;
        self.n_workers = of.max(1);
    }

    fn forward_stage(&mut self, iter: u64, stage: usize) -> Result<Duration, P3Error> {
        let n = self.ranges.len();
        let input = if stage == 0 {
            let (x, y) = batch_tensors(&self.data, &self.rows(iter))?;
            self.labels = Some(y);
            x
        } else {
            let prev = self.outputs.get(stage - 1).and_then(Option::as_ref).ok_or(
                P3Error::OutOfOrder {
                    stage,
                    what: "forward without input",
                },
            )?;
            // A leaf variable: this stage's graph ends here, and backward yields its gradient.
            Var::from_tensor(&prev.detach())?.as_tensor().clone()
        };
        let out = self.module(stage)?.forward_t(&input, true)?;
        if stage + 1 == n {
            let labels = self.labels.as_ref().ok_or(P3Error::OutOfOrder {
                stage,
                what: "forward without labels",
            })?;
            let loss = candle_nn::loss::cross_entropy(&out, labels)?;
            self.last = Some(StepStats {
                loss: loss.to_scalar::<f32>()?,
                accuracy: accuracy(&out, labels)?,
            });
            self.loss = Some(loss);
        }
        self.inputs[stage] = Some(input);
        self.outputs[stage] = Some(out);
        Ok(Duration::ZERO)
    }

    fn backward_stage(&mut self, stage: usize) -> Result<StageGrads, P3Error> {
        let n = self.ranges.len();
        let missing = P3Error::OutOfOrder {
            stage,
            what: "backward without gradient",
        };
        let grads = if stage + 1 == n {
            self.loss.take().ok_or(missing)?.backward()?
        } else {
            let g = self.grad_out.take().ok_or(missing)?;
            let out = self.outputs[stage].take().ok_or(P3Error::OutOfOrder {
                stage,
                what: "backward before forward",
            })?;
            out.apply_op1(SeedGradient { grad: g })?.backward()?
        };
        self.outputs[stage] = None;
        let input = self.inputs[stage].take();
        if stage > 0 {
            let g = input
                .as_ref()
                .and_then(|x| grads.get(x))
                .ok_or(P3Error::OutOfOrder {
                    stage,
                    what: "no gradient for the stage's input",
                })?;
            self.grad_out = Some(g.clone());
        }
        Ok(StageGrads {
            grads: grads_of(&self.params[self.ranges[stage].clone()], &grads)?,
            compute: Duration::ZERO,
        })
    }

    fn stats(&self) -> Option<StepStats> {
        self.last
    }
}

/// The network a saved model (the model file's `network` parameters) describes, checked
/// against its stored tensors.
pub fn saved_network(model: &petrel_ml::model::NetworkModel) -> Result<StagedNet, P3Error> {
    // Before anything is built: building sizes every tensor by the declared fields.
    crate::models::architecture::check_architecture(model)?;
    let net = crate::models::nets::by_name(&model.net, &model.input, model.width, model.classes)
        .ok_or_else(|| P3Error::UnknownNet(model.net.clone()))?;
    let specs: Vec<TensorSpec> = net.specs()?.into_iter().flatten().collect();
    if specs.len() != model.tensors.len() {
        return Err(P3Error::NoTensor(specs.len().min(model.tensors.len())));
    }
    for (t, (s, v)) in specs.iter().zip(&model.tensors).enumerate() {
        s.check(t, v)?;
    }
    Ok(net)
}

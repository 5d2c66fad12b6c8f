//! Real networks on P3 nodes (the `candle` feature): the candle model `[app.p3] net`
//! names, its initial parameters, the worker that trains it, and saved models read back,
//! evaluated and applied.

use std::path::Path;
use std::sync::Arc;

use petrel_actors::NodeContext;
use petrel_ml::MlError;
use petrel_ml::dnn::data::Dataset;
use petrel_ml::model::{ModelParams, NetworkModel};

use super::{P3Settings, WorkerReportFile, save_model};
use crate::error::P3Error;
use crate::kit::{P3Job, StepStats};
use crate::model_file::TrainedWith;
use crate::models::staged::{evaluate, predict_probabilities, saved_network};
use crate::models::{CandleStageModel, StagedNet, nets};
use crate::shells::worker_role;

impl P3Settings {
    /// The real model named by `net` for examples of shape `input`, or `None` when the
    /// job emulates a profile.
    pub fn real_net(&self, input: &[usize]) -> Result<Option<StagedNet>, P3Error> {
        if self.net.is_empty() {
            return Ok(None);
        }
        nets::by_name(&self.net, input, self.width.max(1), 10)
            .map(Some)
            .ok_or_else(|| P3Error::Config {
                field: "[app.p3] net",
                detail: format!(
                    "unknown model {:?} for inputs {input:?} (known: {})",
                    self.net,
                    nets::MODEL_NAMES.join(", ")
                ),
            })
    }
}

pub(super) fn check(cfg: &P3Settings) -> Result<(), P3Error> {
    cfg.real_net(&cfg.input_shape()?).map(drop)
}

/// The real model's initial parameters (every node derives the same ones from `seed`), or
/// `None` when the job emulates a profile.
pub(super) fn initial(cfg: &P3Settings) -> Result<Option<Vec<Vec<f32>>>, P3Error> {
    let Some(net) = cfg.real_net(&cfg.input_shape()?)? else {
        return Ok(None);
    };
    let (_, initial) = net
        .init(cfg.seed)
        .map_err(|e| P3Error::real_model(net.name(), e))?;
    Ok(Some(initial))
}

/// A worker of a real model: trains it on `train_data`; the first worker at the end
/// (worker 0 unless it left) then evaluates it on `test_data` and saves it to `model_out`.
pub(super) async fn worker(ctx: NodeContext, cfg: P3Settings, job: P3Job) -> Result<(), P3Error> {
    let Some(net) = cfg.real_net(&cfg.input_shape()?)? else {
        return Err(P3Error::Config {
            field: "[app.p3] net",
            detail: "empty: the job emulates a profile".into(),
        });
    };
    let (train, test) = cfg.data()?;
    if train.example_shape() != net.input_shape() {
        return Err(P3Error::Config {
            field: "[app.p3] train_data",
            detail: format!(
                "examples are {:?}, model {} takes {:?}",
                train.example_shape(),
                net.name(),
                net.input_shape()
            ),
        });
    }
    let train = Arc::new(train);
    let (workers, batch, initial) = (cfg.workers, cfg.batch, job.initial.clone());
    let n_iter = cfg.iterations;
    let rows = train.len();
    let net2 = net.clone();
    let factory = move |w| CandleStageModel::new(net2, &initial, train, batch, w, workers);
    let progress: crate::kit::Progress = Arc::new(move |w, iter, stats: Option<StepStats>| {
        // An epoch is a pass of all workers over the training rows.
        let per_epoch = (rows / (workers * batch).max(1)).max(1) as u64;
        if w == 0
            && ((iter + 1) % per_epoch == 0 || iter + 1 == n_iter)
            && let Some(s) = stats
        {
            tracing::info!(
                epoch = (iter + 1) as f64 / per_epoch as f64,
                iter = iter + 1,
                loss = s.loss,
                accuracy = s.accuracy,
                "p3 progress"
            );
        }
    });
    let report = worker_role(ctx, Arc::new(job), factory, Some(progress)).await?;
    let mut file = WorkerReportFile::new(&report, cfg.mode);
    if report.is_final_first() {
        if let Some(test) = &test {
            let s = evaluate(&net, &report.params, test, 64)
                .map_err(|e| P3Error::real_model(net.name(), e))?;
            tracing::info!(loss = s.loss, accuracy = s.accuracy, "p3 test set");
            file.test = Some(s);
        }
        if !cfg.model_out.as_os_str().is_empty() {
            let saved = NetworkModel {
                net: cfg.net.clone(),
                input: net.input_shape().to_vec(),
                width: cfg.width.max(1),
                classes: 10,
                tensors: report.params.clone(),
            };
            let names = tensor_names(&saved.net, &saved.input, saved.width, saved.classes)?;
            save_model(&saved, &names, &TrainedWith::of(&cfg), &cfg.model_out)?;
        }
    }
    let path = file.write(&cfg.report_dir)?;
    tracing::info!(worker = report.worker, path = %path.display(), "p3 report written");
    Ok(())
}

/// Reads a model written by [`save_model`] (the file, or a directory holding `model.safetensors`),
/// or the JSON model of earlier versions, and checks it against its network.
pub fn load_model(path: &Path) -> Result<(NetworkModel, StagedNet), P3Error> {
    let saved = crate::model_file::read(path)?;
    let ModelParams::Network(model) = saved.params else {
        return Err(P3Error::Ml(MlError::InconsistentModel {
            path: path.to_path_buf(),
            reason: "its parameters are not those of a network".into(),
        }));
    };
    let net = saved_network(&model).map_err(|e| P3Error::real_model(&model.net, e))?;
    Ok((model, net))
}

/// Every parameter tensor of the network `net` (as [`nets::by_name`] builds it), forward
/// order: its whole-model name ([`StagedNet::named_specs`]) and shape. Call it only on an
/// architecture already checked ([`crate::models::architecture`]): it builds the network.
pub fn tensor_names(
    net: &str,
    input: &[usize],
    width: usize,
    classes: usize,
) -> Result<Vec<(String, Vec<usize>)>, P3Error> {
    let built = nets::by_name(net, input, width, classes)
        .ok_or_else(|| P3Error::real_model(net, P3Error::UnknownNet(net.to_string())))?;
    let specs = built
        .named_specs()
        .map_err(|e| P3Error::real_model(net, e))?;
    Ok(specs.into_iter().map(|s| (s.name, s.shape)).collect())
}

/// Loss and accuracy of a saved network on `examples`.
pub fn evaluate_network(m: &NetworkModel, examples: &Dataset) -> Result<StepStats, P3Error> {
    let net = saved_network(m).map_err(|e| P3Error::real_model(&m.net, e))?;
    evaluate(&net, &m.tensors, examples, 64).map_err(|e| P3Error::real_model(&m.net, e))
}

/// Class probabilities of a saved network for every example, in order.
pub fn predict_network(m: &NetworkModel, examples: &Dataset) -> Result<Vec<Vec<f32>>, P3Error> {
    let net = saved_network(m).map_err(|e| P3Error::real_model(&m.net, e))?;
    predict_probabilities(&net, &m.tensors, examples, 64)
        .map_err(|e| P3Error::real_model(&m.net, e))
}

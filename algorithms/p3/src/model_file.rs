//! The P3 model file: [safetensors](https://huggingface.co/docs/safetensors), which candle,
//! PyTorch and numpy read as any checkpoint: one `F32` tensor per parameter, named as
//! [`StagedNet::build`](crate::models::StagedNet::build)'s `VarBuilder` names it
//! (`dense0.weight`), and string metadata: [`FORMAT`], [`FORMAT_VERSION`], `app`, the
//! architecture and the training settings ([`TrainedWith`]); no paths. Keys are sorted, so
//! one job writes the same bytes every time. Reading checks the metadata and the declared
//! architecture before any network is built; earlier versions' JSON files still read.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use petrel_ml::MlError;
use petrel_ml::model::{ModelParams, NetworkModel, SavedModel};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use serde::{Deserialize, Serialize};

use crate::error::P3Error;
use crate::roles::{MODEL_APP, P3Settings};

/// The model's file name inside a run directory (or an output directory).
pub const MODEL_FILE_NAME: &str = "model.safetensors";
/// The `format` metadata entry.
pub const FORMAT: &str = "petrel-p3-model";
/// The `format_version` metadata entry this code writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// The training settings a model file records: those that shaped its values. The mode,
/// slicing and shard count are left out (every mode computes the same values), and so are
/// data specs and directories (they may be paths).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainedWith {
    /// Seed of the initial values (and of synthetic data).
    pub seed: u64,
    /// Examples per worker per iteration.
    pub batch: usize,
    /// Data-parallel workers (with `batch`, the global batch).
    pub workers: usize,
    /// SGD iterations.
    pub iterations: u64,
    /// SGD learning rate.
    pub lr: f32,
    /// SGD momentum.
    pub momentum: f32,
}

impl TrainedWith {
    /// What `cfg` records in a model file.
    pub fn of(cfg: &P3Settings) -> Self {
        TrainedWith {
            seed: cfg.seed,
            batch: cfg.batch,
            workers: cfg.workers,
            iterations: cfg.iterations,
            lr: cfg.lr,
            momentum: cfg.momentum,
        }
    }

    fn entries(&self) -> [(&'static str, String); 6] {
        [
            ("seed", self.seed.to_string()),
            ("batch", self.batch.to_string()),
            ("workers", self.workers.to_string()),
            ("iterations", self.iterations.to_string()),
            ("lr", self.lr.to_string()),
            ("momentum", self.momentum.to_string()),
        ]
    }
}

/// The file's bytes: `model`'s tensors under `names` (name and shape per tensor, forward
/// order), with its architecture and `trained` as metadata.
pub fn encode(
    model: &NetworkModel,
    names: &[(String, Vec<usize>)],
    trained: &TrainedWith,
) -> Result<Vec<u8>, P3Error> {
    if names.len() != model.tensors.len() {
        return Err(P3Error::TensorNames {
            names: names.len(),
            tensors: model.tensors.len(),
        });
    }
    let mut bytes = Vec::with_capacity(names.len());
    for ((name, shape), values) in names.iter().zip(&model.tensors) {
        if shape.iter().product::<usize>() != values.len() {
            return Err(P3Error::ModelTensor {
                name: name.clone(),
                detail: format!("shape {shape:?} for {} values", values.len()),
            });
        }
        bytes.push(
            values
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<u8>>(),
        );
    }
    let tensors = names.iter().zip(&bytes).map(|((name, shape), data)| {
        TensorView::new(Dtype::F32, shape.clone(), data).map(|t| (name.as_str(), t))
    });
    let input = serde_json::to_string(&model.input).map_err(P3Error::ModelHeader)?;
    let meta: HashMap<String, String> = [
        ("format", FORMAT.to_string()),
        ("format_version", FORMAT_VERSION.to_string()),
        ("app", MODEL_APP.to_string()),
        ("net", model.net.clone()),
        ("width", model.width.to_string()),
        ("input", input),
        ("classes", model.classes.to_string()),
    ]
    .into_iter()
    .chain(trained.entries())
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let tensors = tensors.collect::<Result<Vec<_>, _>>()?;
    sorted_header(safetensors::serialize(tensors, Some(meta))?)
}

/// The header as the safetensors crate reads it back, keys sorted.
#[derive(Serialize, Deserialize)]
struct Header {
    #[serde(rename = "__metadata__")]
    metadata: BTreeMap<String, String>,
    #[serde(flatten)]
    tensors: BTreeMap<String, serde_json::Value>,
}

/// `file` with its header's keys sorted: the crate writes the metadata map in hash order,
/// which would make every save of the same model differ. Tensor offsets are relative to
/// the data, so only the header changes.
fn sorted_header(file: Vec<u8>) -> Result<Vec<u8>, P3Error> {
    let (n, _) = SafeTensors::read_metadata(&file)?;
    let (head, data) = file[8..].split_at(n);
    let header: Header = serde_json::from_slice(head).map_err(P3Error::ModelHeader)?;
    let mut head = serde_json::to_vec(&header).map_err(P3Error::ModelHeader)?;
    // safetensors pads the header with spaces to keep the data 8-byte aligned.
    head.resize(head.len().next_multiple_of(8), b' ');
    let mut out = Vec::with_capacity(8 + head.len() + data.len());
    out.extend((head.len() as u64).to_le_bytes());
    out.extend(head);
    out.extend(data);
    Ok(out)
}

/// True when `bytes` start as a safetensors file (a little-endian header length, then the
/// header's JSON object) rather than as a JSON model.
pub fn is_safetensors(bytes: &[u8]) -> bool {
    let Some((len, rest)) = bytes.split_first_chunk::<8>() else {
        return false;
    };
    u64::from_le_bytes(*len) <= rest.len() as u64 && rest.first() == Some(&b'{')
}

/// Decodes a safetensors model file (`path` names it in errors); the declared
/// architecture is checked against the tensors' counts before any network is built.
pub fn decode(bytes: &[u8], path: &Path) -> Result<SavedModel, P3Error> {
    let bad = |source| P3Error::ModelFormat {
        path: path.to_path_buf(),
        source: Box::new(source),
    };
    let file = SafeTensors::deserialize(bytes).map_err(|e| bad(e.into()))?;
    let (_, header) = SafeTensors::read_metadata(bytes).map_err(|e| bad(e.into()))?;
    let meta = header.metadata().clone().unwrap_or_default();
    let wrong = |key: &'static str, detail: String| bad(P3Error::ModelMetadata { key, detail });
    let get = |key: &'static str| {
        meta.get(key)
            .map(String::as_str)
            .ok_or_else(|| wrong(key, "missing".into()))
    };
    let number = |key: &'static str| {
        get(key)?
            .parse::<usize>()
            .map_err(|e| wrong(key, e.to_string()))
    };
    let format = get("format")?;
    if format != FORMAT {
        let found: String = format.chars().take(64).collect();
        return Err(wrong("format", format!("{found:?} is not {FORMAT:?}")));
    }
    let version = get("format_version")?;
    if version != FORMAT_VERSION.to_string() {
        let found: String = version.chars().take(16).collect();
        let detail = format!("{found:?} is not supported (this petrel reads {FORMAT_VERSION})");
        return Err(wrong("format_version", detail));
    }
    let app = get("app")?;
    if app != MODEL_APP {
        return Err(MlError::WrongApp {
            path: path.to_path_buf(),
            found: app.chars().take(64).collect(),
            expected: MODEL_APP.into(),
        }
        .into());
    }
    let net = get("net")?.to_string();
    let (width, classes) = (number("width")?, number("classes")?);
    let input: Vec<usize> =
        serde_json::from_str(get("input")?).map_err(|e| wrong("input", e.to_string()))?;
    let total = file.iter().try_fold(0usize, |total, (_, t)| {
        let n = t
            .shape()
            .iter()
            .try_fold(1usize, |p, &d| p.checked_mul(d))?;
        total.checked_add(n)
    });
    let tensor_err = |name: &str, detail: String| {
        let name = name.to_string();
        bad(P3Error::ModelTensor { name, detail })
    };
    let total = total.ok_or_else(|| tensor_err("*", "the parameter count overflows".into()))?;
    crate::models::architecture::check_counts(&net, &input, width, classes, file.len(), total)
        .map_err(|e| MlError::InconsistentModel {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    let names = crate::roles::tensor_names(&net, &input, width, classes)?;
    let mut tensors = Vec::with_capacity(names.len());
    for (name, shape) in names {
        let wrong = |detail: String| tensor_err(&name, detail);
        let t = file.tensor(&name).map_err(|_| wrong("missing".into()))?;
        if t.dtype() != Dtype::F32 {
            return Err(wrong(format!("dtype {:?}, expected F32", t.dtype())));
        }
        if t.shape() != shape.as_slice() {
            return Err(wrong(format!(
                "shape {:?}, the network's is {shape:?}",
                t.shape()
            )));
        }
        tensors.push(
            t.data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
        );
    }
    let settings: BTreeMap<&String, &String> = meta.iter().collect();
    let model = NetworkModel {
        net,
        input,
        width,
        classes,
        tensors,
    };
    Ok(SavedModel::new(
        MODEL_APP,
        &settings,
        ModelParams::Network(model),
    ))
}

/// The file a model path names: the path itself, or in a directory its
/// [`MODEL_FILE_NAME`] if present, else its JSON [`petrel_ml::model::MODEL_FILE`].
pub fn resolve(path: &Path) -> PathBuf {
    if !path.is_dir() {
        return path.to_path_buf();
    }
    let file = path.join(MODEL_FILE_NAME);
    if file.exists() {
        file
    } else {
        path.join(petrel_ml::model::MODEL_FILE)
    }
}

/// Reads a P3 model, safetensors or the JSON of earlier versions, and checks its declared
/// architecture against its tensors (before any network is built).
pub fn read(path: &Path) -> Result<SavedModel, P3Error> {
    let path = resolve(path);
    let bytes = std::fs::read(&path).map_err(|source| MlError::ModelIo {
        path: path.clone(),
        source,
    })?;
    if is_safetensors(&bytes) {
        return decode(&bytes, &path);
    }
    let saved = SavedModel::decode(&bytes, &path, MODEL_APP)?;
    let ModelParams::Network(model) = &saved.params else {
        return Err(MlError::InconsistentModel {
            path,
            reason: "its parameters are not those of a network".into(),
        }
        .into());
    };
    crate::models::architecture::check_model_file(model, &path)?;
    Ok(saved)
}

#[cfg(test)]
#[cfg(feature = "candle")]
mod tests {
    use super::*;

    fn trained() -> TrainedWith {
        TrainedWith {
            seed: 3,
            batch: 4,
            workers: 2,
            iterations: 5,
            lr: 0.05,
            momentum: 0.9,
        }
    }

    /// A 4 -> 8 -> 3 MLP with its seeded initial values and its tensor names.
    fn mlp() -> (NetworkModel, Vec<(String, Vec<usize>)>) {
        let net = crate::models::nets::by_name("mlp", &[4], 1, 3).unwrap();
        let (_, tensors) = net.init(7).unwrap();
        let model = NetworkModel {
            net: "mlp".into(),
            input: vec![4],
            width: 1,
            classes: 3,
            tensors,
        };
        let names = crate::roles::tensor_names("mlp", &[4], 1, 3).unwrap();
        (model, names)
    }

    #[test]
    fn a_model_round_trips_under_candle_names_and_same_bytes_every_time() {
        let (model, names) = mlp();
        let names_only: Vec<&str> = names.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names_only,
            [
                "dense0.bias",
                "dense0.weight",
                "dense1.bias",
                "dense1.weight"
            ]
        );
        let bytes = encode(&model, &names, &trained()).unwrap();
        assert_eq!(bytes, encode(&model, &names, &trained()).unwrap());
        assert!(is_safetensors(&bytes));
        let saved = decode(&bytes, Path::new("m.safetensors")).unwrap();
        assert_eq!(saved.params, ModelParams::Network(model));
        assert_eq!(saved.settings["lr"], "0.05");
        assert_eq!(saved.settings["input"], "[4]");
    }

    #[test]
    fn a_declared_architecture_that_does_not_fit_is_refused_before_building() {
        let (model, names) = mlp();
        for (width, field) in [(1usize << 40, "width"), (2, "tensors")] {
            let bad = NetworkModel {
                width,
                ..model.clone()
            };
            let bytes = encode(&bad, &names, &trained()).unwrap();
            let err = decode(&bytes, Path::new("m.safetensors")).unwrap_err();
            assert!(
                err.to_string()
                    .starts_with(&format!("model file m.safetensors: field `{field}`")),
                "{err}"
            );
        }
    }

    #[test]
    fn a_json_model_is_not_taken_for_safetensors() {
        assert!(!is_safetensors(b"{\"format\":\"petrel-model\"}"));
        assert!(!is_safetensors(b"{\n  \"format\": \"petrel-model\"\n}"));
        assert!(!is_safetensors(b"short"));
    }
}

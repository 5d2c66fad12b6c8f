//! Model profiles for communication benchmarking. (Long because most of it is the
//! architecture tables of VGG-19, ResNet-50 and Sockeye, layer by layer, and their tests.)
//!
//! A profile is the ordered list of a model's layers (forward order, layer 0 first) with
//! each layer's parameter count and compute cost. FLOPs are **per sample** (one image, one
//! sentence pair); a multiply-add counts as 2 FLOPs; the backward pass of a layer with
//! weights is taken as 2x its forward (input gradient + weight gradient). Only layers that
//! own parameters are listed: ReLU, pooling and softmax have no parameters to communicate
//! and are < 1% of the FLOPs of these models.
//!
//! # File format (TOML; JSON has the same structure)
//!
//! ```toml
//! name = "my-model"
//!
//! [[layer]]
//! name = "conv1"
//! params = 1792          # number of parameters (f32 each on the wire)
//! fwd_flops = 1.73e8     # per sample
//! bwd_flops = 3.46e8     # optional, defaults to 2 * fwd_flops
//!
//! [[layer]]
//! name = "fc"
//! params = 4097000
//! fwd_ms = 0.8           # measured time per iteration (whole mini-batch, any device)
//! bwd_ms = 1.6           # optional, defaults to 2 * fwd_ms
//! ```
//!
//! Each layer gives either FLOPs (`fwd_flops`[, `bwd_flops`]) or measured times
//! (`fwd_ms`[, `bwd_ms`]), never both kinds; layers of one file may mix the two. Measured
//! times are used as they are (batch size and device speed are ignored for that layer).
//! In JSON: `{"name": "...", "layer": [{"name": "...", "params": 1, "fwd_flops": 2.0}]}`.
//! Unknown keys are rejected, so typos do not silently become defaults.

use std::path::Path;

use serde::Deserialize;

use crate::core::error::P3CoreError;

/// Measured per-iteration compute time of a layer, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MeasuredTime {
    /// Forward time of one iteration.
    pub fwd_s: f64,
    /// Backward time of one iteration.
    pub bwd_s: f64,
}

/// One layer of a profile.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerProfile {
    /// The layer's name (e.g. `conv1_1`).
    pub name: String,
    /// Parameters the layer owns (f32 each on the wire).
    pub params: u64,
    /// Forward FLOPs per sample.
    pub fwd_flops: f64,
    /// Backward FLOPs per sample.
    pub bwd_flops: f64,
    /// When set (profile given in ms), overrides the FLOP-derived times.
    pub measured: Option<MeasuredTime>,
}

impl LayerProfile {
    /// A layer with backward = 2 x forward.
    pub fn new(name: impl Into<String>, params: u64, fwd_flops: f64) -> Self {
        LayerProfile {
            name: name.into(),
            params,
            fwd_flops,
            bwd_flops: 2.0 * fwd_flops,
            measured: None,
        }
    }

    /// Forward time of one iteration of `batch` samples on a device sustaining
    /// `device_flops_per_s`.
    pub fn fwd_seconds(&self, device_flops_per_s: f64, batch: usize) -> f64 {
        match self.measured {
            Some(m) => m.fwd_s,
            None => self.fwd_flops * batch as f64 / device_flops_per_s,
        }
    }

    /// Backward time of one iteration, like [`LayerProfile::fwd_seconds`].
    pub fn bwd_seconds(&self, device_flops_per_s: f64, batch: usize) -> f64 {
        match self.measured {
            Some(m) => m.bwd_s,
            None => self.bwd_flops * batch as f64 / device_flops_per_s,
        }
    }
}

/// A model: its layers in forward order.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelProfile {
    /// The model's name.
    pub name: String,
    /// Layers with parameters, forward order.
    pub layers: Vec<LayerProfile>,
}

/// Hyper-parameters of the Sockeye-style seq2seq profile.
///
/// Defaults follow Sockeye 1.x's RNN defaults (`--num-embed 512 --rnn-num-hidden 1024
/// --num-layers 1:1`, bi-directional LSTM encoder with half the hidden size per direction,
/// MLP attention of the hidden size, input feeding, "hidden concat" attention output layer,
/// decoder state initialised from the last encoder state) with 32k-entry source and target
/// vocabularies (a typical BPE size; separate tables) and 50-token sentences on both sides.
/// Total: 86,560,000 parameters, of which 38% in the output projection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SockeyeConfig {
    /// Source vocabulary size.
    pub src_vocab: u64,
    /// Target vocabulary size.
    pub tgt_vocab: u64,
    /// Embedding size.
    pub embed: u64,
    /// LSTM hidden size.
    pub hidden: u64,
    /// Source sentence length in tokens.
    pub src_len: u64,
    /// Target sentence length in tokens.
    pub tgt_len: u64,
}

impl Default for SockeyeConfig {
    fn default() -> Self {
        SockeyeConfig {
            src_vocab: 32_000,
            tgt_vocab: 32_000,
            embed: 512,
            hidden: 1024,
            src_len: 50,
            tgt_len: 50,
        }
    }
}

/// On-disk form of a profile (see the module docs).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileFile {
    name: String,
    #[serde(rename = "layer", default)]
    layers: Vec<LayerEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LayerEntry {
    name: String,
    params: u64,
    fwd_flops: Option<f64>,
    bwd_flops: Option<f64>,
    fwd_ms: Option<f64>,
    bwd_ms: Option<f64>,
}

fn conv_layer(
    name: String,
    k: u64,
    cin: u64,
    cout: u64,
    hw_out: u64,
    extra_params: u64,
) -> LayerProfile {
    let params = k * k * cin * cout + extra_params;
    let flops = 2.0 * (k * k * cin * cout) as f64 * (hw_out * hw_out) as f64;
    LayerProfile::new(name, params, flops)
}

fn fc_layer(name: impl Into<String>, fin: u64, fout: u64) -> LayerProfile {
    LayerProfile::new(name, fin * fout + fout, 2.0 * (fin * fout) as f64)
}

/// Parameters of an LSTM layer with MXNet-style separate input and recurrent biases.
fn lstm_params(input: u64, hidden: u64) -> u64 {
    4 * hidden * (input + hidden) + 8 * hidden
}

impl ModelProfile {
    /// Parameters of the whole model.
    pub fn total_params(&self) -> u64 {
        self.layers.iter().map(|l| l.params).sum()
    }

    /// Forward FLOPs per sample of the whole model.
    pub fn total_fwd_flops(&self) -> f64 {
        self.layers.iter().map(|l| l.fwd_flops).sum()
    }

    /// Backward FLOPs per sample of the whole model.
    pub fn total_bwd_flops(&self) -> f64 {
        self.layers.iter().map(|l| l.bwd_flops).sum()
    }

    /// Parameter count of every layer, in order (input of [`crate::core::SlicePlan::new`]).
    pub fn param_counts(&self) -> Vec<u64> {
        self.layers.iter().map(|l| l.params).collect()
    }

    /// One of the built-in profiles by name: `vgg19`, `resnet50`, `sockeye`.
    pub fn builtin(name: &str) -> Result<Self, P3CoreError> {
        match name.to_ascii_lowercase().replace(['-', '_'], "").as_str() {
            "vgg19" => Ok(Self::vgg19()),
            "resnet50" => Ok(Self::resnet50()),
            "sockeye" => Ok(Self::sockeye(&SockeyeConfig::default())),
            _ => Err(P3CoreError::UnknownModel(name.to_string())),
        }
    }

    /// VGG-19 (configuration E) for 224x224x3 ImageNet: 16 3x3 convolutions (pad 1, with
    /// bias) and 3 fully connected layers; 143,667,240 parameters, ~39 GFLOPs forward.
    pub fn vgg19() -> Self {
        let stages: [(u64, usize, u64); 5] = [
            (64, 2, 224),
            (128, 2, 112),
            (256, 4, 56),
            (512, 4, 28),
            (512, 4, 14),
        ];
        let mut layers = Vec::new();
        let mut cin = 3;
        for (s, &(cout, n, hw)) in stages.iter().enumerate() {
            for i in 0..n {
                let name = format!("conv{}_{}", s + 1, i + 1);
                layers.push(conv_layer(name, 3, cin, cout, hw, cout));
                cin = cout;
            }
        }
        layers.push(fc_layer("fc6", 512 * 7 * 7, 4096));
        layers.push(fc_layer("fc7", 4096, 4096));
        layers.push(fc_layer("fc8", 4096, 1000));
        ModelProfile {
            name: "vgg19".into(),
            layers,
        }
    }

    /// ResNet-50 (v1.5 as in torchvision/MXNet model zoo: stride on the 3x3 conv) for 224x224x3:
    /// one entry per convolution including its batch norm (gamma and beta are parameters, running
    /// statistics are not), plus the final FC; 25,557,032 parameters, ~8.2 GFLOPs forward.
    pub fn resnet50() -> Self {
        let mut layers = vec![conv_layer("conv1".into(), 7, 3, 64, 112, 2 * 64)];
        let mut cin = 64;
        let mut hw = 56; // after the 3x3/2 max pool
        for (s, &(blocks, width, stride)) in
            [(3u64, 64u64, 1u64), (4, 128, 2), (6, 256, 2), (3, 512, 2)]
                .iter()
                .enumerate()
        {
            for b in 0..blocks {
                let st = if b == 0 { stride } else { 1 };
                let hw_out = hw / st;
                let p = format!("layer{}.{}", s + 1, b);
                let out = 4 * width;
                let mut convs = vec![
                    ("conv1", 1, cin, width, hw),
                    ("conv2", 3, width, width, hw_out),
                    ("conv3", 1, width, out, hw_out),
                ];
                if b == 0 {
                    convs.push(("downsample", 1, cin, out, hw_out));
                }
                for (name, k, c_in, c_out, side) in convs {
                    let name = format!("{p}.{name}");
                    layers.push(conv_layer(name, k, c_in, c_out, side, 2 * c_out));
                }
                cin = out;
                hw = hw_out;
            }
        }
        layers.push(fc_layer("fc", 2048, 1000));
        ModelProfile {
            name: "resnet50".into(),
            layers,
        }
    }

    /// Sockeye-style LSTM seq2seq with attention; see [`SockeyeConfig`] for the hyper-parameters.
    /// Layers in the order the forward pass first needs them. FLOPs are per sentence pair:
    /// LSTMs `2 * 4h(in+h)` per step, the attention MLP, the attention output layer and the vocabulary
    /// projection per target step; embedding look-ups are counted as free.
    pub fn sockeye(c: &SockeyeConfig) -> Self {
        let (e, h) = (c.embed, c.hidden);
        let hd = h / 2; // per encoder direction
        let (s, t) = (c.src_len as f64, c.tgt_len as f64);
        let lstm_step = |inp: u64, hid: u64| 2.0 * (4 * hid * (inp + hid)) as f64;
        let (hh, v) = ((h * h) as f64, c.tgt_vocab);
        let layers = [
            ("src_embed", c.src_vocab * e, 0.0),
            (
                "encoder.bilstm",
                2 * lstm_params(e, hd),
                2.0 * s * lstm_step(e, hd),
            ),
            // last encoder state -> decoder hidden and cell state
            ("decoder.state_init", 2 * (h * h + h), 2.0 * 2.0 * hh),
            ("tgt_embed", v * e, 0.0),
            // input feeding: embedding + previous attention output
            (
                "decoder.lstm",
                lstm_params(e + h, h),
                t * lstm_step(e + h, h),
            ),
            // MLP attention: encoder projection (once per source position), query
            // projection (per target step), score vector.
            (
                "decoder.attention",
                2 * h * h + h,
                s * 2.0 * hh + t * (2.0 * hh + s * 4.0 * h as f64 + s * 2.0 * h as f64),
            ),
            (
                "decoder.attention_hidden",
                2 * h * h + h,
                t * 2.0 * (2 * h * h) as f64,
            ),
            ("output_projection", h * v + v, t * 2.0 * (h * v) as f64),
        ];
        let layers = layers
            .into_iter()
            .map(|(n, p, f)| LayerProfile::new(n, p, f));
        ModelProfile {
            name: "sockeye".into(),
            layers: layers.collect(),
        }
    }

    /// The same model shrunk by `factor` (e.g. 0.01): parameter counts (rounded, at least
    /// 1 for a layer that had any), FLOPs and measured times are all multiplied by it, so
    /// at a given bandwidth and device speed both C and M shrink by `factor` and their
    /// ratio - which decides how much P3 helps - is unchanged.
    pub fn scaled(&self, factor: f64) -> ModelProfile {
        let f = Some(factor)
            .filter(|f| f.is_finite() && *f > 0.0)
            .unwrap_or(1.0);
        ModelProfile {
            name: format!("{}x{}", self.name, f),
            layers: self
                .layers
                .iter()
                .map(|l| LayerProfile {
                    name: l.name.clone(),
                    params: ((l.params as f64 * f).round() as u64).max(l.params.min(1)),
                    fwd_flops: l.fwd_flops * f,
                    bwd_flops: l.bwd_flops * f,
                    measured: l.measured.map(|m| MeasuredTime {
                        fwd_s: m.fwd_s * f,
                        bwd_s: m.bwd_s * f,
                    }),
                })
                .collect(),
        }
    }

    fn from_file(file: ProfileFile, origin: &str) -> Result<Self, P3CoreError> {
        let invalid = |detail: String| P3CoreError::Invalid {
            origin: origin.to_string(),
            detail,
        };
        if file.layers.is_empty() {
            return Err(invalid("profile has no [[layer]] entries".into()));
        }
        let mut layers = Vec::with_capacity(file.layers.len());
        for (i, l) in file.layers.into_iter().enumerate() {
            let at = format!("layer {i} ({:?})", l.name);
            for (key, v) in [
                ("fwd_flops", l.fwd_flops),
                ("bwd_flops", l.bwd_flops),
                ("fwd_ms", l.fwd_ms),
                ("bwd_ms", l.bwd_ms),
            ] {
                if let Some(v) = v
                    && !(v.is_finite() && v >= 0.0)
                {
                    return Err(invalid(format!(
                        "{at}: {key} = {v} must be finite and >= 0"
                    )));
                }
            }
            let has_flops = l.fwd_flops.is_some() || l.bwd_flops.is_some();
            let has_ms = l.fwd_ms.is_some() || l.bwd_ms.is_some();
            let (fwd, bwd, unit) = match (has_flops, has_ms) {
                (true, true) => {
                    return Err(invalid(format!(
                        "{at}: give either fwd_flops/bwd_flops or fwd_ms/bwd_ms, not both"
                    )));
                }
                (false, false) => {
                    return Err(invalid(format!(
                        "{at}: missing compute cost (fwd_flops or fwd_ms)"
                    )));
                }
                (true, false) => (l.fwd_flops, l.bwd_flops, "flops"),
                (false, true) => (l.fwd_ms, l.bwd_ms, "ms"),
            };
            let fwd =
                fwd.ok_or_else(|| invalid(format!("{at}: bwd_{unit} given without fwd_{unit}")))?;
            let bwd = bwd.unwrap_or(2.0 * fwd);
            let ms = has_ms.then_some(MeasuredTime {
                fwd_s: fwd / 1e3,
                bwd_s: bwd / 1e3,
            });
            layers.push(LayerProfile {
                name: l.name,
                params: l.params,
                fwd_flops: if has_ms { 0.0 } else { fwd },
                bwd_flops: if has_ms { 0.0 } else { bwd },
                measured: ms,
            });
        }
        Ok(ModelProfile {
            name: file.name,
            layers,
        })
    }

    /// Parses a TOML profile; `origin` (a path or `<string>`) is used in errors.
    pub fn from_toml_str(s: &str, origin: &str) -> Result<Self, P3CoreError> {
        let file: ProfileFile = toml::from_str(s).map_err(|source| P3CoreError::Toml {
            origin: origin.to_string(),
            source: Box::new(source),
        })?;
        Self::from_file(file, origin)
    }

    /// Parses a JSON profile; `origin` is used in errors.
    pub fn from_json_str(s: &str, origin: &str) -> Result<Self, P3CoreError> {
        let file: ProfileFile = serde_json::from_str(s).map_err(|source| P3CoreError::Json {
            origin: origin.to_string(),
            source,
        })?;
        Self::from_file(file, origin)
    }

    /// Every layer's forward and backward seconds per iteration on a device of `flops`
    /// FLOP/s at `batch` samples.
    pub fn layer_seconds(&self, flops: f64, batch: usize) -> (Vec<f64>, Vec<f64>) {
        let times = self.layers.iter();
        times
            .map(|l| (l.fwd_seconds(flops, batch), l.bwd_seconds(flops, batch)))
            .unzip()
    }

    /// Loads a `.toml` or `.json` profile (format chosen by extension).
    pub fn load(path: impl AsRef<Path>) -> Result<Self, P3CoreError> {
        let path = path.as_ref();
        let json = match path.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("toml") => false,
            Some(e) if e.eq_ignore_ascii_case("json") => true,
            _ => {
                return Err(P3CoreError::UnknownFormat {
                    path: path.to_path_buf(),
                });
            }
        };
        let text = std::fs::read_to_string(path).map_err(|source| P3CoreError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let origin = path.display().to_string();
        if json {
            Self::from_json_str(&text, &origin)
        } else {
            Self::from_toml_str(&text, &origin)
        }
    }
}

#[cfg(test)]
mod tests;

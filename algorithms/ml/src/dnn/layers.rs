//! Layers with real forward and backward passes. (Long because it holds every layer kind,
//! each with its backward pass and a finite-difference test; they share the [`Layer`] enum.)
//!
//! Each layer caches what its backward pass needs during `forward`, and `backward` takes
//! dL/d(output), stores dL/d(params) and returns dL/d(input).

use ndarray::{Array1, Array2, ArrayD, ArrayView2, Axis, Ix2, IxDyn};
use rand::Rng;
use rand_distr::{Distribution, Normal, Uniform};

use crate::dnn::DnnError;

/// Weight initialisation scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Init {
    /// He (Kaiming) normal, `std = sqrt(2 / fan_in)`: keeps activation variance stable
    /// through ReLU layers.
    He,
    /// Xavier (Glorot) uniform, `limit = sqrt(6 / (fan_in + fan_out))`: for layers not
    /// followed by a ReLU (the output layer).
    Xavier,
}

fn init_vec<R: Rng + ?Sized>(
    len: usize,
    fan_in: usize,
    fan_out: usize,
    init: Init,
    rng: &mut R,
) -> Vec<f32> {
    match init {
        Init::He => {
            let std = (2.0 / fan_in.max(1) as f64).sqrt();
            // std is finite and > 0, so Normal::new cannot fail; fall back to zeros anyway.
            match Normal::new(0.0f64, std) {
                Ok(d) => (0..len).map(|_| d.sample(rng) as f32).collect(),
                Err(_) => vec![0.0; len],
            }
        }
        Init::Xavier => {
            let limit = (6.0 / (fan_in + fan_out).max(1) as f64).sqrt();
            let d = Uniform::new_inclusive(-limit, limit);
            (0..len).map(|_| d.sample(rng) as f32).collect()
        }
    }
}

/// Contiguous row-major copy (or borrow) of an array's elements in logical order.
fn contiguous(a: &ArrayD<f32>) -> std::borrow::Cow<'_, [f32]> {
    match a.as_slice() {
        Some(s) => std::borrow::Cow::Borrowed(s),
        None => std::borrow::Cow::Owned(a.iter().copied().collect()),
    }
}

fn shape_err(layer: &str, expected: impl Into<String>, got: &[usize]) -> DnnError {
    DnnError::Shape {
        layer: layer.to_string(),
        expected: expected.into(),
        got: got.to_vec(),
    }
}

/// Flat view of a parameter array. Parameter arrays are created in standard layout and
/// only ever written in place, so the slice always exists; an empty slice would only
/// appear if that invariant were broken.
fn flat<D: ndarray::Dimension>(a: &ndarray::Array<f32, D>) -> &[f32] {
    a.as_slice().unwrap_or(&[])
}

fn flat_mut<D: ndarray::Dimension>(a: &mut ndarray::Array<f32, D>) -> &mut [f32] {
    a.as_slice_mut().unwrap_or(&mut [])
}

/// Fully connected layer: `y = x W^T + b`, `W` is `[out, in]`.
#[derive(Debug, Clone)]
pub struct Dense {
    in_features: usize,
    out_features: usize,
    weight: Array2<f32>,
    bias: Array1<f32>,
    grad_weight: Array2<f32>,
    grad_bias: Array1<f32>,
    input: Option<Array2<f32>>,
}

impl Dense {
    /// A new layer with seeded weights and zero bias.
    pub fn new<R: Rng + ?Sized>(
        in_features: usize,
        out_features: usize,
        init: Init,
        rng: &mut R,
    ) -> Self {
        let w = init_vec(
            in_features * out_features,
            in_features,
            out_features,
            init,
            rng,
        );
        let weight = Array2::from_shape_vec((out_features, in_features), w)
            .unwrap_or_else(|_| Array2::zeros((out_features, in_features)));
        Dense {
            in_features,
            out_features,
            weight,
            bias: Array1::zeros(out_features),
            grad_weight: Array2::zeros((out_features, in_features)),
            grad_bias: Array1::zeros(out_features),
            input: None,
        }
    }

    /// Input features.
    pub fn in_features(&self) -> usize {
        self.in_features
    }

    /// Output features.
    pub fn out_features(&self) -> usize {
        self.out_features
    }

    /// `x W^T + b` for `x` of shape `(N, in)`; keeps `x` for backward.
    pub fn forward(&mut self, x: &ArrayD<f32>) -> Result<ArrayD<f32>, DnnError> {
        let x2 = x
            .view()
            .into_dimensionality::<Ix2>()
            .ok()
            .filter(|v| v.ncols() == self.in_features)
            .ok_or_else(|| shape_err("dense", format!("(N, {})", self.in_features), x.shape()))?;
        let y = x2.dot(&self.weight.t()) + &self.bias;
        self.input = Some(x2.to_owned());
        Ok(y.into_dyn())
    }

    /// Stores the weight and bias gradients; returns the input gradient.
    pub fn backward(&mut self, grad_out: &ArrayD<f32>) -> Result<ArrayD<f32>, DnnError> {
        let input = self.input.as_ref().ok_or(DnnError::NoForward {
            layer: "dense".into(),
        })?;
        let g = grad_out
            .view()
            .into_dimensionality::<Ix2>()
            .ok()
            .filter(|v| v.ncols() == self.out_features && v.nrows() == input.nrows())
            .ok_or_else(|| {
                shape_err(
                    "dense",
                    format!("({}, {})", input.nrows(), self.out_features),
                    grad_out.shape(),
                )
            })?;
        // assign() keeps the gradient arrays in standard layout (flat views stay valid).
        self.grad_weight.assign(&g.t().dot(input));
        self.grad_bias.assign(&g.sum_axis(Axis(0)));
        Ok(g.dot(&self.weight).into_dyn())
    }
}

/// Rectified linear unit.
#[derive(Debug, Clone, Default)]
pub struct Relu {
    mask: Option<ArrayD<bool>>,
}

impl Relu {
    /// A ReLU.
    pub fn new() -> Self {
        Relu::default()
    }

    /// `max(x, 0)` element-wise; keeps the mask for backward.
    pub fn forward(&mut self, x: &ArrayD<f32>) -> Result<ArrayD<f32>, DnnError> {
        self.mask = Some(x.mapv(|v| v > 0.0));
        Ok(x.mapv(|v| v.max(0.0)))
    }

    /// The gradient through the kept mask.
    pub fn backward(&mut self, grad_out: &ArrayD<f32>) -> Result<ArrayD<f32>, DnnError> {
        let mask = self.mask.as_ref().ok_or(DnnError::NoForward {
            layer: "relu".into(),
        })?;
        if mask.shape() != grad_out.shape() {
            return Err(shape_err(
                "relu",
                format!("{:?}", mask.shape()),
                grad_out.shape(),
            ));
        }
        let mut g = grad_out.clone();
        ndarray::Zip::from(&mut g).and(mask).for_each(|g, &m| {
            if !m {
                *g = 0.0;
            }
        });
        Ok(g)
    }
}

/// 2-D convolution, NCHW, stride 1, zero padding `padding`, square kernel.
///
/// Implemented as im2col + one matrix multiply over the whole batch: the columns matrix is
/// `[c_in*k*k, N*h_out*w_out]`, so forward is `W[c_out, c_in*k*k] . cols`.
#[derive(Debug, Clone)]
pub struct Conv2d {
    c_in: usize,
    c_out: usize,
    kernel: usize,
    padding: usize,
    /// `[c_out, c_in*k*k]`; flat data identical to `[c_out, c_in, k, k]` row-major.
    weight: Array2<f32>,
    bias: Array1<f32>,
    grad_weight: Array2<f32>,
    grad_bias: Array1<f32>,
    cache: Option<ConvCache>,
}

#[derive(Debug, Clone)]
struct ConvCache {
    cols: Array2<f32>,
    n: usize,
    h: usize,
    w: usize,
}

impl Conv2d {
    /// A `k x k` convolution from `c_in` to `c_out` channels with `padding`, stride 1.
    pub fn new<R: Rng + ?Sized>(
        c_in: usize,
        c_out: usize,
        kernel: usize,
        padding: usize,
        init: Init,
        rng: &mut R,
    ) -> Self {
        let kk = c_in * kernel * kernel;
        let w = init_vec(c_out * kk, kk, c_out * kernel * kernel, init, rng);
        let weight =
            Array2::from_shape_vec((c_out, kk), w).unwrap_or_else(|_| Array2::zeros((c_out, kk)));
        Conv2d {
            c_in,
            c_out,
            kernel,
            padding,
            weight,
            bias: Array1::zeros(c_out),
            grad_weight: Array2::zeros((c_out, kk)),
            grad_bias: Array1::zeros(c_out),
            cache: None,
        }
    }

    /// Input channels.
    pub fn c_in(&self) -> usize {
        self.c_in
    }
    /// Output channels.
    pub fn c_out(&self) -> usize {
        self.c_out
    }
    /// Kernel size.
    pub fn kernel(&self) -> usize {
        self.kernel
    }
    /// Zero padding on each side.
    pub fn padding(&self) -> usize {
        self.padding
    }

    /// Output spatial size for an input of `h x w`, or `None` if the kernel does not fit.
    pub fn output_hw(&self, h: usize, w: usize) -> Option<(usize, usize)> {
        let hp = h + 2 * self.padding;
        let wp = w + 2 * self.padding;
        if hp < self.kernel || wp < self.kernel {
            return None;
        }
        Some((hp - self.kernel + 1, wp - self.kernel + 1))
    }

    /// Convolves an `(N, C, H, W)` input; keeps it for backward.
    pub fn forward(&mut self, x: &ArrayD<f32>) -> Result<ArrayD<f32>, DnnError> {
        let s = x.shape();
        let expected = || format!("(N, {}, H, W)", self.c_in);
        if s.len() != 4 || s[1] != self.c_in {
            return Err(shape_err("conv2d", expected(), s));
        }
        let (n, h, w) = (s[0], s[2], s[3]);
        let (ho, wo) = self
            .output_hw(h, w)
            .ok_or_else(|| shape_err("conv2d", "input at least kernel size", s))?;
        let (k, p, ci, co) = (self.kernel, self.padding as isize, self.c_in, self.c_out);
        let xs = contiguous(x);
        let hw = ho * wo;
        let ncol = n * hw;
        let kk = ci * k * k;
        let mut cols = vec![0.0f32; kk * ncol];
        for b in 0..n {
            for c in 0..ci {
                let plane = &xs[(b * ci + c) * h * w..(b * ci + c + 1) * h * w];
                for ky in 0..k {
                    for kx in 0..k {
                        let row = (c * k + ky) * k + kx;
                        let dst = &mut cols[row * ncol + b * hw..row * ncol + (b + 1) * hw];
                        for oy in 0..ho {
                            let iy = oy as isize + ky as isize - p;
                            if iy < 0 || iy >= h as isize {
                                continue;
                            }
                            let src = &plane[iy as usize * w..(iy as usize + 1) * w];
                            for ox in 0..wo {
                                let ix = ox as isize + kx as isize - p;
                                if ix >= 0 && ix < w as isize {
                                    dst[oy * wo + ox] = src[ix as usize];
                                }
                            }
                        }
                    }
                }
            }
        }
        let cols = Array2::from_shape_vec((kk, ncol), cols)
            .map_err(|_| shape_err("conv2d", expected(), s))?;
        let out = self.weight.dot(&cols); // [co, n*hw]
        let mut y = vec![0.0f32; n * co * hw];
        for o in 0..co {
            let row = out.row(o);
            let bo = self.bias[o];
            for b in 0..n {
                let dst = &mut y[(b * co + o) * hw..(b * co + o + 1) * hw];
                for (j, d) in dst.iter_mut().enumerate() {
                    *d = row[b * hw + j] + bo;
                }
            }
        }
        self.cache = Some(ConvCache { cols, n, h, w });
        ArrayD::from_shape_vec(IxDyn(&[n, co, ho, wo]), y)
            .map_err(|_| shape_err("conv2d", expected(), s))
    }

    /// Stores the weight and bias gradients; returns the input gradient.
    pub fn backward(&mut self, grad_out: &ArrayD<f32>) -> Result<ArrayD<f32>, DnnError> {
        let cache = self.cache.as_ref().ok_or(DnnError::NoForward {
            layer: "conv2d".into(),
        })?;
        let (n, h, w) = (cache.n, cache.h, cache.w);
        let (ho, wo) = self
            .output_hw(h, w)
            .ok_or_else(|| shape_err("conv2d", "cached input", &[n, self.c_in, h, w]))?;
        let (k, p, ci, co) = (self.kernel, self.padding as isize, self.c_in, self.c_out);
        if grad_out.shape() != [n, co, ho, wo] {
            return Err(shape_err(
                "conv2d",
                format!("({n}, {co}, {ho}, {wo})"),
                grad_out.shape(),
            ));
        }
        let gs = contiguous(grad_out);
        let hw = ho * wo;
        let ncol = n * hw;
        let mut gm = vec![0.0f32; co * ncol];
        for b in 0..n {
            for o in 0..co {
                gm[o * ncol + b * hw..o * ncol + (b + 1) * hw]
                    .copy_from_slice(&gs[(b * co + o) * hw..(b * co + o + 1) * hw]);
            }
        }
        let gm = Array2::from_shape_vec((co, ncol), gm)
            .map_err(|_| shape_err("conv2d", "grad", grad_out.shape()))?;
        self.grad_weight.assign(&gm.dot(&cache.cols.t()));
        self.grad_bias.assign(&gm.sum_axis(Axis(1)));
        let dcols = self.weight.t().dot(&gm); // [kk, ncol]
        // col2im: scatter-add every column entry back to the input pixel it came from.
        let mut dx = vec![0.0f32; n * ci * h * w];
        for b in 0..n {
            for c in 0..ci {
                let plane = &mut dx[(b * ci + c) * h * w..(b * ci + c + 1) * h * w];
                for ky in 0..k {
                    for kx in 0..k {
                        let row = dcols.row((c * k + ky) * k + kx);
                        for oy in 0..ho {
                            let iy = oy as isize + ky as isize - p;
                            if iy < 0 || iy >= h as isize {
                                continue;
                            }
                            for ox in 0..wo {
                                let ix = ox as isize + kx as isize - p;
                                if ix >= 0 && ix < w as isize {
                                    plane[iy as usize * w + ix as usize] +=
                                        row[b * hw + oy * wo + ox];
                                }
                            }
                        }
                    }
                }
            }
        }
        ArrayD::from_shape_vec(IxDyn(&[n, ci, h, w]), dx)
            .map_err(|_| shape_err("conv2d", "grad", grad_out.shape()))
    }
}

/// 2x2 max pooling with stride 2 (odd trailing rows/columns are dropped, like floor mode).
#[derive(Debug, Clone, Default)]
pub struct MaxPool2d {
    /// For every output element, the flat index of the winning input element.
    argmax: Option<(Vec<usize>, Vec<usize>)>,
}

impl MaxPool2d {
    /// A 2x2 max pool.
    pub fn new() -> Self {
        MaxPool2d::default()
    }

    /// Max over 2x2 windows of an `(N, C, H, W)` input; keeps the arg-max for backward.
    pub fn forward(&mut self, x: &ArrayD<f32>) -> Result<ArrayD<f32>, DnnError> {
        let s = x.shape();
        if s.len() != 4 || s[2] < 2 || s[3] < 2 {
            return Err(shape_err("maxpool2d", "(N, C, H>=2, W>=2)", s));
        }
        let (n, c, h, w) = (s[0], s[1], s[2], s[3]);
        let (ho, wo) = (h / 2, w / 2);
        let xs = contiguous(x);
        let mut y = Vec::with_capacity(n * c * ho * wo);
        let mut arg = Vec::with_capacity(n * c * ho * wo);
        for plane in 0..n * c {
            let base = plane * h * w;
            for oy in 0..ho {
                for ox in 0..wo {
                    let mut best = base + 2 * oy * w + 2 * ox;
                    for (dy, dx) in [(0, 1), (1, 0), (1, 1)] {
                        let i = base + (2 * oy + dy) * w + 2 * ox + dx;
                        if xs[i] > xs[best] {
                            best = i;
                        }
                    }
                    y.push(xs[best]);
                    arg.push(best);
                }
            }
        }
        self.argmax = Some((arg, s.to_vec()));
        ArrayD::from_shape_vec(IxDyn(&[n, c, ho, wo]), y)
            .map_err(|_| shape_err("maxpool2d", "(N, C, H, W)", s))
    }

    /// Routes each gradient to its window's arg-max.
    pub fn backward(&mut self, grad_out: &ArrayD<f32>) -> Result<ArrayD<f32>, DnnError> {
        let (arg, in_shape) = self.argmax.as_ref().ok_or(DnnError::NoForward {
            layer: "maxpool2d".into(),
        })?;
        let expected = [in_shape[0], in_shape[1], in_shape[2] / 2, in_shape[3] / 2];
        if grad_out.shape() != expected {
            return Err(shape_err(
                "maxpool2d",
                format!("{expected:?}"),
                grad_out.shape(),
            ));
        }
        let mut dx = ArrayD::<f32>::zeros(IxDyn(in_shape));
        let gs = contiguous(grad_out);
        if let Some(d) = dx.as_slice_mut() {
            for (&i, &g) in arg.iter().zip(gs.iter()) {
                d[i] += g;
            }
        }
        Ok(dx)
    }
}

/// Flattens `(N, ...)` to `(N, prod(...))`.
#[derive(Debug, Clone, Default)]
pub struct Flatten {
    in_shape: Option<Vec<usize>>,
}

impl Flatten {
    /// A flatten.
    pub fn new() -> Self {
        Flatten::default()
    }

    /// Reshapes `(N, ...)` to `(N, features)`; keeps the shape for backward.
    pub fn forward(&mut self, x: &ArrayD<f32>) -> Result<ArrayD<f32>, DnnError> {
        let s = x.shape();
        if s.is_empty() {
            return Err(shape_err("flatten", "(N, ...)", s));
        }
        let rest: usize = s[1..].iter().product();
        let data = contiguous(x).into_owned();
        self.in_shape = Some(s.to_vec());
        ArrayD::from_shape_vec(IxDyn(&[s[0], rest]), data)
            .map_err(|_| shape_err("flatten", "(N, ...)", s))
    }

    /// Reshapes the gradient back to the input's shape.
    pub fn backward(&mut self, grad_out: &ArrayD<f32>) -> Result<ArrayD<f32>, DnnError> {
        let shape = self.in_shape.as_ref().ok_or(DnnError::NoForward {
            layer: "flatten".into(),
        })?;
        let data = contiguous(grad_out).into_owned();
        if data.len() != shape.iter().product::<usize>() {
            return Err(shape_err(
                "flatten",
                format!("{} elements", shape.iter().product::<usize>()),
                grad_out.shape(),
            ));
        }
        ArrayD::from_shape_vec(IxDyn(shape), data)
            .map_err(|_| shape_err("flatten", "grad", grad_out.shape()))
    }
}

/// One layer of a [`crate::dnn::Sequential`] network.
#[derive(Debug, Clone)]
pub enum Layer {
    /// A dense layer.
    Dense(Dense),
    /// A ReLU.
    Relu(Relu),
    /// A convolution.
    Conv2d(Conv2d),
    /// A max pool.
    MaxPool2d(MaxPool2d),
    /// A flatten.
    Flatten(Flatten),
}

impl Layer {
    /// Short lower-case kind name, used in parameter names.
    pub fn kind(&self) -> &'static str {
        match self {
            Layer::Dense(_) => "dense",
            Layer::Relu(_) => "relu",
            Layer::Conv2d(_) => "conv2d",
            Layer::MaxPool2d(_) => "maxpool2d",
            Layer::Flatten(_) => "flatten",
        }
    }

    /// The layer's forward pass.
    pub fn forward(&mut self, x: &ArrayD<f32>) -> Result<ArrayD<f32>, DnnError> {
        match self {
            Layer::Dense(l) => l.forward(x),
            Layer::Relu(l) => l.forward(x),
            Layer::Conv2d(l) => l.forward(x),
            Layer::MaxPool2d(l) => l.forward(x),
            Layer::Flatten(l) => l.forward(x),
        }
    }

    /// The layer's backward pass: stores parameter gradients, returns the input gradient.
    pub fn backward(&mut self, grad_out: &ArrayD<f32>) -> Result<ArrayD<f32>, DnnError> {
        match self {
            Layer::Dense(l) => l.backward(grad_out),
            Layer::Relu(l) => l.backward(grad_out),
            Layer::Conv2d(l) => l.backward(grad_out),
            Layer::MaxPool2d(l) => l.backward(grad_out),
            Layer::Flatten(l) => l.backward(grad_out),
        }
    }

    /// `(suffix, shape)` of each parameter tensor, in the order of [`Layer::params`].
    pub fn param_shapes(&self) -> Vec<(&'static str, Vec<usize>)> {
        match self {
            Layer::Dense(l) => vec![
                ("weight", vec![l.out_features, l.in_features]),
                ("bias", vec![l.out_features]),
            ],
            Layer::Conv2d(l) => vec![
                ("weight", vec![l.c_out, l.c_in, l.kernel, l.kernel]),
                ("bias", vec![l.c_out]),
            ],
            _ => vec![],
        }
    }

    /// Flat views of the parameter tensors (weight first, then bias).
    pub fn params(&self) -> Vec<&[f32]> {
        match self {
            Layer::Dense(l) => vec![flat(&l.weight), flat(&l.bias)],
            Layer::Conv2d(l) => vec![flat(&l.weight), flat(&l.bias)],
            _ => vec![],
        }
    }

    /// Mutable flat views of the parameter tensors, weight first.
    pub fn params_mut(&mut self) -> Vec<&mut [f32]> {
        match self {
            Layer::Dense(l) => vec![flat_mut(&mut l.weight), flat_mut(&mut l.bias)],
            Layer::Conv2d(l) => vec![flat_mut(&mut l.weight), flat_mut(&mut l.bias)],
            _ => vec![],
        }
    }

    /// Flat views of the gradients from the last backward pass (zeros before any).
    pub fn grads(&self) -> Vec<&[f32]> {
        match self {
            Layer::Dense(l) => vec![flat(&l.grad_weight), flat(&l.grad_bias)],
            Layer::Conv2d(l) => vec![flat(&l.grad_weight), flat(&l.grad_bias)],
            _ => vec![],
        }
    }
}

/// Softmax followed by mean cross-entropy over the batch. Stateless: the gradient of the
/// mean loss w.r.t. the logits is `(softmax - onehot) / N`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SoftmaxCrossEntropy;

impl SoftmaxCrossEntropy {
    fn check(logits: &ArrayView2<f32>, labels: &[usize]) -> Result<(), DnnError> {
        if logits.nrows() != labels.len() || logits.ncols() == 0 {
            return Err(shape_err(
                "softmax_cross_entropy",
                format!("({}, C>0)", labels.len()),
                logits.shape(),
            ));
        }
        for (row, &label) in labels.iter().enumerate() {
            if label >= logits.ncols() {
                return Err(DnnError::Label {
                    row,
                    label,
                    classes: logits.ncols(),
                });
            }
        }
        Ok(())
    }

    /// Row-wise softmax, computed stably (max subtracted).
    pub fn softmax(logits: &ArrayView2<f32>) -> Array2<f32> {
        let mut p = logits.to_owned();
        for mut row in p.rows_mut() {
            let m = row.fold(f32::NEG_INFINITY, |a, &b| a.max(b));
            row.mapv_inplace(|v| (v - m).exp());
            let s = row.sum();
            row.mapv_inplace(|v| v / s);
        }
        p
    }

    /// Mean loss and dL/dlogits.
    pub fn loss_and_grad(
        logits: &ArrayView2<f32>,
        labels: &[usize],
    ) -> Result<(f32, Array2<f32>), DnnError> {
        Self::check(logits, labels)?;
        let n = labels.len().max(1) as f32;
        let mut p = Self::softmax(logits);
        let mut loss = 0.0f64;
        for (mut row, &y) in p.rows_mut().into_iter().zip(labels) {
            loss -= (row[y].max(1e-30) as f64).ln();
            row[y] -= 1.0;
            row.mapv_inplace(|v| v / n);
        }
        Ok(((loss / n as f64) as f32, p))
    }

    /// Mean loss and fraction of rows whose arg-max equals the label.
    pub fn loss_and_accuracy(
        logits: &ArrayView2<f32>,
        labels: &[usize],
    ) -> Result<(f32, f32), DnnError> {
        let (loss, _) = Self::loss_and_grad(logits, labels)?;
        let correct = logits
            .rows()
            .into_iter()
            .zip(labels)
            .filter(|(row, y)| argmax(row.iter().copied()) == **y)
            .count();
        Ok((loss, correct as f32 / labels.len().max(1) as f32))
    }
}

/// Index of the largest element (first one on ties); 0 for an empty iterator.
pub fn argmax(it: impl Iterator<Item = f32>) -> usize {
    let mut best = (0, f32::NEG_INFINITY);
    for (i, v) in it.enumerate() {
        if v > best.1 {
            best = (i, v);
        }
    }
    best.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    fn rand_array(shape: &[usize], seed: u64) -> ArrayD<f32> {
        let mut rng = StdRng::seed_from_u64(seed);
        let n: usize = shape.iter().product();
        let d = Uniform::new(-1.0f32, 1.0);
        ArrayD::from_shape_vec(IxDyn(shape), (0..n).map(|_| d.sample(&mut rng)).collect()).unwrap()
    }

    /// Scalar test loss L = sum(out * r) for a fixed random r, so dL/dout = r.
    fn loss_of(layer: &mut Layer, x: &ArrayD<f32>, r: &ArrayD<f32>) -> f64 {
        let y = layer.forward(x).unwrap();
        y.iter()
            .zip(r.iter())
            .map(|(a, b)| *a as f64 * *b as f64)
            .sum()
    }

    /// Central finite differences on inputs and every parameter, compared to backward.
    fn grad_check(mut layer: Layer, x: ArrayD<f32>) {
        let y = layer.forward(&x).unwrap();
        let r = rand_array(y.shape(), 99);
        let dx = layer.backward(&r).unwrap();
        let grads: Vec<Vec<f32>> = layer.grads().iter().map(|g| g.to_vec()).collect();
        let eps = 1e-2f32;
        let tol = |a: f64, n: f64| (a - n).abs() <= 2e-2 * (1.0 + a.abs().max(n.abs()));
        // inputs
        let mut xp = x.clone();
        for i in 0..x.len() {
            let orig = xp.as_slice().unwrap()[i];
            xp.as_slice_mut().unwrap()[i] = orig + eps;
            let lp = loss_of(&mut layer, &xp, &r);
            xp.as_slice_mut().unwrap()[i] = orig - eps;
            let lm = loss_of(&mut layer, &xp, &r);
            xp.as_slice_mut().unwrap()[i] = orig;
            let num = (lp - lm) / (2.0 * eps as f64);
            let ana = dx.as_slice().unwrap()[i] as f64;
            assert!(tol(ana, num), "{} dx[{i}]: {ana} vs {num}", layer.kind());
        }
        // parameters
        for (t, g) in grads.iter().enumerate() {
            for (i, &gi) in g.iter().enumerate() {
                let orig = layer.params()[t][i];
                layer.params_mut()[t][i] = orig + eps;
                let lp = loss_of(&mut layer, &x, &r);
                layer.params_mut()[t][i] = orig - eps;
                let lm = loss_of(&mut layer, &x, &r);
                layer.params_mut()[t][i] = orig;
                let num = (lp - lm) / (2.0 * eps as f64);
                let ana = gi as f64;
                assert!(
                    tol(ana, num),
                    "{} param {t}[{i}]: {ana} vs {num}",
                    layer.kind()
                );
            }
        }
    }

    #[test]
    fn grad_check_dense() {
        let mut rng = StdRng::seed_from_u64(1);
        grad_check(
            Layer::Dense(Dense::new(5, 4, Init::Xavier, &mut rng)),
            rand_array(&[3, 5], 2),
        );
    }

    #[test]
    fn grad_check_relu() {
        // keep inputs away from the kink at 0 so finite differences are valid
        let x = rand_array(&[4, 6], 3).mapv(|v| if v.abs() < 0.05 { v + 0.2 } else { v });
        grad_check(Layer::Relu(Relu::new()), x);
    }

    #[test]
    fn grad_check_conv2d() {
        let mut rng = StdRng::seed_from_u64(4);
        for padding in [0, 1] {
            grad_check(
                Layer::Conv2d(Conv2d::new(2, 3, 3, padding, Init::He, &mut rng)),
                rand_array(&[2, 2, 5, 4], 5),
            );
        }
    }

    #[test]
    fn grad_check_maxpool() {
        // distinct values spaced well beyond eps so the arg-max never flips
        let n = 2 * 2 * 4 * 5;
        let mut vals: Vec<f32> = (0..n).map(|i| i as f32 * 0.1).collect();
        let mut rng = StdRng::seed_from_u64(6);
        rand::seq::SliceRandom::shuffle(&mut vals[..], &mut rng);
        let x = ArrayD::from_shape_vec(IxDyn(&[2, 2, 4, 5]), vals).unwrap();
        grad_check(Layer::MaxPool2d(MaxPool2d::new()), x);
    }

    #[test]
    fn grad_check_flatten() {
        grad_check(Layer::Flatten(Flatten::new()), rand_array(&[2, 3, 2, 2], 7));
    }

    #[test]
    fn grad_check_softmax_cross_entropy() {
        let logits = rand_array(&[4, 5], 8).into_dimensionality::<Ix2>().unwrap();
        let labels = [0, 4, 2, 2];
        let (_, g) = SoftmaxCrossEntropy::loss_and_grad(&logits.view(), &labels).unwrap();
        let eps = 1e-2f32;
        for i in 0..4 {
            for j in 0..5 {
                let mut lp = logits.clone();
                lp[[i, j]] += eps;
                let mut lm = logits.clone();
                lm[[i, j]] -= eps;
                let a = SoftmaxCrossEntropy::loss_and_grad(&lp.view(), &labels)
                    .unwrap()
                    .0;
                let b = SoftmaxCrossEntropy::loss_and_grad(&lm.view(), &labels)
                    .unwrap()
                    .0;
                let num = (a - b) / (2.0 * eps);
                assert!((num - g[[i, j]]).abs() < 1e-3, "{num} vs {}", g[[i, j]]);
            }
        }
    }

    #[test]
    fn conv_matches_direct_convolution() {
        let mut rng = StdRng::seed_from_u64(9);
        let mut conv = Conv2d::new(2, 2, 3, 1, Init::He, &mut rng);
        let x = rand_array(&[1, 2, 4, 4], 10);
        let y = conv.forward(&x).unwrap();
        assert_eq!(y.shape(), &[1, 2, 4, 4]);
        let w = conv.weight.clone();
        for o in 0..2 {
            for oy in 0..4isize {
                for ox in 0..4isize {
                    let mut acc = conv.bias[o];
                    for c in 0..2 {
                        for ky in 0..3isize {
                            for kx in 0..3isize {
                                let (iy, ix) = (oy + ky - 1, ox + kx - 1);
                                if (0..4).contains(&iy) && (0..4).contains(&ix) {
                                    acc += w[[o, (c * 3 + ky as usize) * 3 + kx as usize]]
                                        * x[[0, c, iy as usize, ix as usize]];
                                }
                            }
                        }
                    }
                    assert!((acc - y[[0, o, oy as usize, ox as usize]]).abs() < 1e-5);
                }
            }
        }
    }

    #[test]
    fn bad_shapes_are_errors_not_panics() {
        let mut rng = StdRng::seed_from_u64(11);
        let mut d = Dense::new(3, 2, Init::He, &mut rng);
        assert!(d.backward(&rand_array(&[1, 2], 1)).is_err());
        assert!(d.forward(&rand_array(&[1, 4], 1)).is_err());
        let mut c = Conv2d::new(1, 1, 3, 0, Init::He, &mut rng);
        assert!(c.forward(&rand_array(&[1, 1, 2, 2], 1)).is_err());
        assert!(c.forward(&rand_array(&[1, 2, 5, 5], 1)).is_err());
        let mut p = MaxPool2d::new();
        assert!(p.forward(&rand_array(&[1, 1, 1, 4], 1)).is_err());
        let logits = Array2::<f32>::zeros((2, 3));
        assert!(matches!(
            SoftmaxCrossEntropy::loss_and_grad(&logits.view(), &[0, 3]),
            Err(DnnError::Label { .. })
        ));
    }
}

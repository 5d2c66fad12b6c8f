//! Data sets: synthetic generators and an IDX (MNIST format) loader.
//!
//! IDX (big-endian): magic `0x0000_08NN` (`NN` dimensions of unsigned bytes), one `u32` per
//! dimension, then the data row-major. Bad input is an [`MlError`] naming the file.

use std::path::Path;

use ndarray::{ArrayD, Axis, IxDyn};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand_distr::{Distribution, Normal};

use crate::MlError;

/// Magic number of an IDX unsigned-byte 3-D file (images).
pub const IDX_IMAGES_MAGIC: u32 = 0x0000_0803;
/// Magic number of an IDX unsigned-byte 1-D file (labels).
pub const IDX_LABELS_MAGIC: u32 = 0x0000_0801;

/// Examples `x` (batch-first, any per-example shape) with class labels `y`.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// Examples, batch-first.
    pub x: ArrayD<f32>,
    /// Class label of every example.
    pub y: Vec<usize>,
    /// Number of classes (labels are below it).
    pub n_classes: usize,
}

impl Dataset {
    /// Number of examples.
    pub fn len(&self) -> usize {
        self.y.len()
    }

    /// True when there are no examples.
    pub fn is_empty(&self) -> bool {
        self.y.is_empty()
    }

    /// Shape of one example (without the batch axis).
    pub fn example_shape(&self) -> &[usize] {
        &self.x.shape()[1..]
    }

    /// The examples at `indices` (each must be `< len()`; out-of-range ones are skipped).
    pub fn select(&self, indices: &[usize]) -> (ArrayD<f32>, Vec<usize>) {
        let idx: Vec<usize> = indices
            .iter()
            .copied()
            .filter(|&i| i < self.len())
            .collect();
        let x = self.x.select(Axis(0), &idx);
        let y = idx.iter().map(|&i| self.y[i]).collect();
        (x, y)
    }
}

/// `n` points in `dim` dimensions from `classes` Gaussian clusters (centres N(0, 3^2),
/// points N(centre, spread^2)), balanced and shuffled.
pub fn gaussian_clusters(
    n: usize,
    dim: usize,
    classes: usize,
    spread: f32,
    seed: u64,
) -> Result<Dataset, MlError> {
    if classes == 0 || dim == 0 || !(spread.is_finite() && spread >= 0.0) {
        return Err(MlError::InvalidArgument(format!(
            "gaussian_clusters: classes={classes}, dim={dim}, spread={spread}"
        )));
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let centre_d = Normal::new(0.0f32, 3.0).map_err(|e| MlError::InvalidArgument(e.to_string()))?;
    let centres: Vec<Vec<f32>> = (0..classes)
        .map(|_| (0..dim).map(|_| centre_d.sample(&mut rng)).collect())
        .collect();
    noisy_templates(&mut rng, &centres, n, spread, &[dim], |v| v)
}

/// `n` examples of the class `templates` (balanced, shuffled), each its template plus
/// N(0, noise^2) noise passed through `finish`, of shape `[n, shape..]`.
pub(crate) fn noisy_templates(
    rng: &mut StdRng,
    templates: &[Vec<f32>],
    n: usize,
    noise: f32,
    shape: &[usize],
    finish: impl Fn(f32) -> f32,
) -> Result<Dataset, MlError> {
    let bad = |e: String| MlError::InvalidArgument(e);
    let d = Normal::new(0.0f32, noise).map_err(|e| bad(e.to_string()))?;
    let mut y: Vec<usize> = (0..n).map(|i| i % templates.len()).collect();
    y.shuffle(rng);
    let mut x = Vec::with_capacity(n * shape.iter().product::<usize>());
    for &label in &y {
        x.extend(templates[label].iter().map(|t| finish(t + d.sample(rng))));
    }
    let dims: Vec<usize> = std::iter::once(n).chain(shape.iter().copied()).collect();
    let x = ArrayD::from_shape_vec(IxDyn(&dims), x).map_err(|e| bad(e.to_string()))?;
    Ok(Dataset {
        x,
        y,
        n_classes: templates.len(),
    })
}

/// `n` inputs from N(0, 1)^dim labelled by the arg-max of a random teacher MLP
/// `dim -> hidden (ReLU) -> classes` (N(0, 2/fan_in) weights).
pub fn teacher_mlp(
    n: usize,
    dim: usize,
    hidden: usize,
    classes: usize,
    seed: u64,
) -> Result<Dataset, MlError> {
    if dim == 0 || hidden == 0 || classes == 0 {
        return Err(MlError::InvalidArgument(format!(
            "teacher_mlp needs dim, hidden and classes >= 1 (got {dim}, {hidden}, {classes})"
        )));
    }
    let bad = |e: rand_distr::NormalError| MlError::InvalidArgument(e.to_string());
    let mut rng = StdRng::seed_from_u64(seed ^ 0x7ea_c4e2);
    let mut weights = |rows: usize, cols: usize| -> Result<ndarray::Array2<f32>, MlError> {
        let d = Normal::new(0.0f32, (2.0 / cols as f32).sqrt()).map_err(bad)?;
        Ok(ndarray::Array2::from_shape_simple_fn((rows, cols), || {
            d.sample(&mut rng)
        }))
    };
    let (w1, w2) = (weights(dim, hidden)?, weights(hidden, classes)?);
    let mut rng = StdRng::seed_from_u64(seed);
    let d = Normal::new(0.0f32, 1.0).map_err(bad)?;
    let inputs = ndarray::Array2::from_shape_simple_fn((n, dim), || d.sample(&mut rng));
    let logits = inputs.dot(&w1).mapv(|h| h.max(0.0)).dot(&w2);
    let y = logits
        .rows()
        .into_iter()
        .map(|r| (1..classes).fold(0, |b, c| if r[c] > r[b] { c } else { b }))
        .collect();
    Ok(Dataset {
        x: inputs.into_dyn(),
        y,
        n_classes: classes,
    })
}

/// `n` images `(N, 1, side, side)` in `classes` classes: a random binary template per
/// class plus N(0, noise^2) pixel noise, balanced and shuffled (a stand-in for MNIST).
pub fn template_images(
    n: usize,
    classes: usize,
    side: usize,
    noise: f32,
    seed: u64,
) -> Result<Dataset, MlError> {
    if classes == 0 || side == 0 || !(noise.is_finite() && noise >= 0.0) {
        return Err(MlError::InvalidArgument(format!(
            "template_images: classes={classes}, side={side}, noise={noise}"
        )));
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let px = side * side;
    let templates: Vec<Vec<f32>> = (0..classes)
        .map(|_| {
            (0..px)
                .map(|_| f32::from(u8::from(rand::Rng::gen_bool(&mut rng, 0.5))))
                .collect()
        })
        .collect();
    noisy_templates(&mut rng, &templates, n, noise, &[1, side, side], |v| v)
}

/// Raw IDX image file contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdxImages {
    /// Number of images.
    pub n: usize,
    /// Rows per image.
    pub rows: usize,
    /// Columns per image.
    pub cols: usize,
    /// `n * rows * cols` bytes, row-major.
    pub pixels: Vec<u8>,
}

pub(crate) fn read_file(path: &Path) -> Result<Vec<u8>, MlError> {
    std::fs::read(path).map_err(|source| MlError::DatasetIo {
        path: path.to_path_buf(),
        source,
    })
}

/// Validates magic and header, returns the dimensions and the data bytes.
fn parse_idx<'a>(
    bytes: &'a [u8],
    path: &Path,
    magic: u32,
) -> Result<(Vec<usize>, &'a [u8]), MlError> {
    let ndims = (magic & 0xff) as usize;
    let header_len = 4 + 4 * ndims;
    let be_u32 = |i: usize| -> Option<u32> {
        let b = bytes.get(i..i + 4)?;
        Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    let truncated = |what, expected| MlError::DatasetTruncated {
        path: path.to_path_buf(),
        what,
        expected,
        found: bytes.len(),
    };
    let found = be_u32(0).ok_or(truncated("magic number", 4))?;
    if found != magic {
        return Err(MlError::BadMagic {
            path: path.to_path_buf(),
            expected: magic,
            found,
        });
    }
    if bytes.len() < header_len {
        return Err(truncated("header", header_len));
    }
    let dims: Vec<usize> = (0..ndims)
        .filter_map(|d| be_u32(4 + 4 * d))
        .map(|v| v as usize)
        .collect();
    let data_len = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| dimension(path, format!("dimensions {dims:?} overflow")))?;
    let data = &bytes[header_len..];
    if data.len() < data_len {
        return Err(truncated("data", header_len + data_len));
    }
    if data.len() > data_len {
        let n = data.len();
        let why = format!(
            "dimensions {dims:?} give {data_len} data bytes but the file has {n} (trailing bytes)"
        );
        return Err(dimension(path, why));
    }
    Ok((dims, data))
}

pub(crate) fn dimension(path: &Path, detail: String) -> MlError {
    MlError::Dimension {
        path: path.to_path_buf(),
        detail,
    }
}

/// Parses an IDX images file already in memory; `path` is only used in errors.
pub fn parse_idx_images(bytes: &[u8], path: &Path) -> Result<IdxImages, MlError> {
    let (dims, data) = parse_idx(bytes, path, IDX_IMAGES_MAGIC)?;
    let &[n, rows, cols] = dims.as_slice() else {
        let why = format!("expected 3 dimensions, got {dims:?}");
        return Err(dimension(path, why));
    };
    if rows == 0 || cols == 0 {
        let why = format!("image size {rows}x{cols} is empty");
        return Err(dimension(path, why));
    }
    Ok(IdxImages {
        n,
        rows,
        cols,
        pixels: data.to_vec(),
    })
}

/// Parses an IDX labels file already in memory; `path` is only used in errors.
pub fn parse_idx_labels(bytes: &[u8], path: &Path) -> Result<Vec<u8>, MlError> {
    let (_, data) = parse_idx(bytes, path, IDX_LABELS_MAGIC)?;
    Ok(data.to_vec())
}

/// Reads an IDX images file (see [`parse_idx_images`]).
pub fn read_idx_images(path: impl AsRef<Path>) -> Result<IdxImages, MlError> {
    let path = path.as_ref();
    parse_idx_images(&read_file(path)?, path)
}

/// Reads an IDX labels file (see [`parse_idx_labels`]).
pub fn read_idx_labels(path: impl AsRef<Path>) -> Result<Vec<u8>, MlError> {
    let path = path.as_ref();
    parse_idx_labels(&read_file(path)?, path)
}

/// Loads an MNIST-style pair into a dataset of shape `(N, 1, rows, cols)` with pixels
/// scaled to `[0, 1]`. Checks that counts agree and every label is `< n_classes`.
pub fn load_idx_dataset(
    images_path: impl AsRef<Path>,
    labels_path: impl AsRef<Path>,
    n_classes: usize,
) -> Result<Dataset, MlError> {
    let (ip, lp) = (images_path.as_ref(), labels_path.as_ref());
    let images = read_idx_images(ip)?;
    let labels = read_idx_labels(lp)?;
    if images.n != labels.len() {
        return Err(MlError::CountMismatch {
            images: ip.to_path_buf(),
            labels: lp.to_path_buf(),
            n_images: images.n,
            n_labels: labels.len(),
        });
    }
    if let Some((index, &label)) = labels
        .iter()
        .enumerate()
        .find(|&(_, &l)| l as usize >= n_classes)
    {
        return Err(MlError::LabelOutOfRange {
            path: lp.to_path_buf(),
            index,
            label: label as usize,
            classes: n_classes,
        });
    }
    let data: Vec<f32> = images.pixels.iter().map(|&p| p as f32 / 255.0).collect();
    let x = ArrayD::from_shape_vec(IxDyn(&[images.n, 1, images.rows, images.cols]), data)
        .map_err(|e| dimension(ip, e.to_string()))?;
    Ok(Dataset {
        x,
        y: labels.iter().map(|&l| l as usize).collect(),
        n_classes,
    })
}

#[cfg(test)]
mod tests;

//! The CIFAR-10 binary format and a seeded CIFAR-shaped generator for tests.
//!
//! A CIFAR-10 binary file is a bare sequence of 3073-byte records: a label byte (0..=9),
//! then 32x32 red, green and blue planes. A partial record or a bad label is a
//! [`MlError::Record`] naming the file and the record's byte offset.

use std::path::Path;

use ndarray::{ArrayD, IxDyn};
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::MlError;
use crate::dnn::data::{Dataset, dimension, noisy_templates, read_file};

/// Side of a CIFAR-10 image.
pub const CIFAR_SIDE: usize = 32;
/// Colour channels of a CIFAR-10 image.
pub const CIFAR_CHANNELS: usize = 3;
/// Bytes of one record: the label and the `3 x 32 x 32` pixels.
pub const CIFAR_RECORD: usize = 1 + CIFAR_CHANNELS * CIFAR_SIDE * CIFAR_SIDE;
/// Classes of CIFAR-10.
pub const CIFAR_CLASSES: usize = 10;

/// Parses CIFAR-10 binary records already in memory into `(N, 3, 32, 32)` examples with
/// pixels scaled to `[0, 1]`; `path` is only used in errors.
pub fn parse_cifar10(bytes: &[u8], path: &Path) -> Result<Dataset, MlError> {
    let record = |offset: usize, detail| MlError::Record {
        path: path.to_path_buf(),
        offset: offset as u64,
        detail,
    };
    let whole = bytes.len() / CIFAR_RECORD * CIFAR_RECORD;
    if whole != bytes.len() {
        let why = format!(
            "truncated record: {} of {CIFAR_RECORD} bytes (the file has {} bytes, not a \
             multiple of {CIFAR_RECORD})",
            bytes.len() - whole,
            bytes.len()
        );
        return Err(record(whole, why));
    }
    let n = bytes.len() / CIFAR_RECORD;
    let mut y = Vec::with_capacity(n);
    let mut x = Vec::with_capacity(n * (CIFAR_RECORD - 1));
    for (i, rec) in bytes.chunks_exact(CIFAR_RECORD).enumerate() {
        let label = rec[0] as usize;
        if label >= CIFAR_CLASSES {
            let why = format!("label {label} of record {i} is not below {CIFAR_CLASSES}");
            return Err(record(i * CIFAR_RECORD, why));
        }
        y.push(label);
        x.extend(rec[1..].iter().map(|&p| f32::from(p) / 255.0));
    }
    let x = ArrayD::from_shape_vec(IxDyn(&[n, CIFAR_CHANNELS, CIFAR_SIDE, CIFAR_SIDE]), x)
        .map_err(|e| dimension(path, e.to_string()))?;
    Ok(Dataset {
        x,
        y,
        n_classes: CIFAR_CLASSES,
    })
}

/// Reads one CIFAR-10 binary file (see [`parse_cifar10`]).
pub fn read_cifar10(path: impl AsRef<Path>) -> Result<Dataset, MlError> {
    let path = path.as_ref();
    let bytes = read_file(path)?;
    parse_cifar10(&bytes, path)
}

/// Reads several CIFAR-10 binary files (e.g. the five training batches) into one data set,
/// in the order given.
pub fn read_cifar10_files<P: AsRef<Path>>(paths: &[P]) -> Result<Dataset, MlError> {
    let mut parts = Vec::with_capacity(paths.len());
    for p in paths {
        parts.push(read_cifar10(p)?);
    }
    let n: usize = parts.iter().map(Dataset::len).sum();
    let mut x = Vec::with_capacity(n * (CIFAR_RECORD - 1));
    let mut y = Vec::with_capacity(n);
    for part in parts {
        x.extend(part.x.iter().copied());
        y.extend(part.y);
    }
    let x = ArrayD::from_shape_vec(IxDyn(&[n, CIFAR_CHANNELS, CIFAR_SIDE, CIFAR_SIDE]), x)
        .map_err(|e| MlError::InvalidArgument(e.to_string()))?;
    Ok(Dataset {
        x,
        y,
        n_classes: CIFAR_CLASSES,
    })
}

/// Writes a CIFAR-shaped data set as a CIFAR-10 binary file, pixels rounded to bytes.
pub fn write_cifar10(path: impl AsRef<Path>, data: &Dataset) -> Result<(), MlError> {
    let path = path.as_ref();
    let shape = [CIFAR_CHANNELS, CIFAR_SIDE, CIFAR_SIDE];
    if data.example_shape() != shape {
        return Err(dimension(
            path,
            format!("examples are {:?}, not {shape:?}", data.example_shape()),
        ));
    }
    let mut out = Vec::with_capacity(data.len() * CIFAR_RECORD);
    let pixels: Vec<f32> = data.x.iter().copied().collect();
    for (i, (&label, img)) in data
        .y
        .iter()
        .zip(pixels.chunks_exact(CIFAR_RECORD - 1))
        .enumerate()
    {
        let label = u8::try_from(label)
            .ok()
            .filter(|&l| usize::from(l) < CIFAR_CLASSES)
            .ok_or(MlError::LabelOutOfRange {
                path: path.to_path_buf(),
                index: i,
                label,
                classes: CIFAR_CLASSES,
            })?;
        out.push(label);
        out.extend(
            img.iter()
                .map(|&v| (v.clamp(0.0, 1.0) * 255.0).round() as u8),
        );
    }
    std::fs::write(path, out).map_err(|source| MlError::DatasetIo {
        path: path.to_path_buf(),
        source,
    })
}

/// `n` CIFAR-shaped images in `classes` classes, values in `[0, 1]`: a random 8x8 colour
/// template per class upsampled to 32x32, plus N(0, noise^2) pixel noise, clamped.
pub fn synthetic_cifar(
    n: usize,
    classes: usize,
    noise: f32,
    seed: u64,
) -> Result<Dataset, MlError> {
    if classes == 0 || classes > CIFAR_CLASSES || !(noise.is_finite() && noise >= 0.0) {
        return Err(MlError::InvalidArgument(format!(
            "synthetic_cifar: classes={classes} (1..=10), noise={noise}"
        )));
    }
    let mut rng = StdRng::seed_from_u64(seed);
    const COARSE: usize = 8;
    let up = CIFAR_SIDE / COARSE;
    let templates: Vec<Vec<f32>> = (0..classes)
        .map(|_| {
            let coarse: Vec<f32> = (0..CIFAR_CHANNELS * COARSE * COARSE)
                .map(|_| rand::Rng::gen_range(&mut rng, 0.0f32..1.0))
                .collect();
            let mut img = Vec::with_capacity(CIFAR_RECORD - 1);
            for c in 0..CIFAR_CHANNELS {
                for r in 0..CIFAR_SIDE {
                    for col in 0..CIFAR_SIDE {
                        img.push(coarse[(c * COARSE + r / up) * COARSE + col / up]);
                    }
                }
            }
            img
        })
        .collect();
    let shape = [CIFAR_CHANNELS, CIFAR_SIDE, CIFAR_SIDE];
    noisy_templates(&mut rng, &templates, n, noise, &shape, |v| {
        v.clamp(0.0, 1.0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cifar_round_trips_through_the_binary_format() {
        let dir = tempfile::tempdir().unwrap();
        let data = synthetic_cifar(7, 10, 0.1, 3).unwrap();
        let (a, b) = (dir.path().join("a.bin"), dir.path().join("b.bin"));
        write_cifar10(&a, &data).unwrap();
        write_cifar10(&b, &data).unwrap();
        assert_eq!(std::fs::metadata(&a).unwrap().len(), 7 * 3073);
        let back = read_cifar10(&a).unwrap();
        assert_eq!(back.y, data.y);
        assert_eq!(back.x.shape(), &[7, 3, 32, 32]);
        let err = back
            .x
            .iter()
            .zip(data.x.iter())
            .map(|(p, q)| (p - q).abs())
            .fold(0.0f32, f32::max);
        assert!(err <= 0.5 / 255.0 + 1e-6, "{err}");
        let both = read_cifar10_files(&[&a, &b]).unwrap();
        assert_eq!(both.len(), 14);
        assert_eq!(&both.y[7..], &data.y[..]);
    }

    #[test]
    fn cifar_errors_name_the_file_and_offset() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("batch.bin");
        let mut bytes = vec![0u8; 2 * CIFAR_RECORD + 5];
        std::fs::write(&p, &bytes).unwrap();
        let e = read_cifar10(&p).unwrap_err();
        assert!(matches!(e, MlError::Record { offset, .. } if offset == 2 * CIFAR_RECORD as u64));
        let msg = e.to_string();
        assert!(msg.contains("batch.bin") && msg.contains("6146"), "{msg}");
        bytes.truncate(2 * CIFAR_RECORD);
        bytes[CIFAR_RECORD] = 10;
        std::fs::write(&p, &bytes).unwrap();
        let msg = read_cifar10(&p).unwrap_err().to_string();
        assert!(
            msg.contains("offset 3073") && msg.contains("label 10"),
            "{msg}"
        );
        let missing = read_cifar10(dir.path().join("nope.bin")).unwrap_err();
        assert!(missing.to_string().contains("nope.bin"));
        assert!(synthetic_cifar(4, 11, 0.1, 1).is_err());
    }

    proptest::proptest! {
        #[test]
        fn cifar_parser_never_panics(bytes in proptest::collection::vec(0u8..=255, 0..7000)) {
            let _ = parse_cifar10(&bytes, Path::new("fuzz"));
        }
    }
}

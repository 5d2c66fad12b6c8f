//! A saved network's declared architecture checked against the parameters its file holds,
//! by arithmetic alone: building the network first would size every tensor by the
//! declared `width`, `input` and `classes`, so a few hundred bytes of model file could ask
//! for terabytes (or an initialiser range that does not exist) before anything compares
//! them with the tensors.
//!
//! The parameter count of each layout ([`declared_parameters`]) is computed with checked
//! arithmetic and must equal, tensor count and total, what the file stores; a network is
//! only built once that holds, so it is never larger than the file's own parameters.

use std::path::Path;

use petrel_ml::MlError;
use petrel_ml::model::NetworkModel;

use crate::error::P3Error;

/// Largest `width` any layout accepts (the published ResNet-18 and VGG-11 use 64).
pub const MAX_WIDTH: usize = 1 << 16;
/// Largest `classes` of a head.
pub const MAX_CLASSES: usize = 1 << 20;
/// Largest extent of one input dimension (channels, height or width).
pub const MAX_INPUT_EXTENT: usize = 1 << 16;

/// The error for a declared architecture whose `field` is wrong, and why.
fn wrong(field: &'static str, detail: impl Into<String>) -> P3Error {
    P3Error::Architecture {
        field,
        detail: detail.into(),
    }
}

/// Adds the parameters of layers given as `(fan_in, fan_out, kernel area)`, each with a
/// weight and a bias tensor, to `(tensors, total)`; `None` on overflow.
fn layers(sizes: &[(usize, usize, usize)]) -> Option<(usize, usize)> {
    sizes
        .iter()
        .try_fold((0usize, 0usize), |(tensors, total), &(a, b, k)| {
            let weight = a.checked_mul(b)?.checked_mul(k)?;
            Some((tensors + 2, total.checked_add(weight)?.checked_add(b)?))
        })
}

/// The number of tensors and of parameters of the network `net` (as
/// `nets::by_name` builds it) for examples of shape `input`, with `width` and `classes`,
/// each field first checked against its bounds.
pub fn declared_parameters(
    net: &str,
    input: &[usize],
    width: usize,
    classes: usize,
) -> Result<(usize, usize), P3Error> {
    for (field, v, max) in [
        ("width", width, MAX_WIDTH),
        ("classes", classes, MAX_CLASSES),
    ] {
        if !(1..=max).contains(&v) {
            return Err(wrong(field, format!("{v} is outside 1..={max}")));
        }
    }
    if input.is_empty() || input.len() > 4 {
        return Err(wrong(
            "input",
            format!("{} dimensions, expected 1 to 4", input.len()),
        ));
    }
    if let Some(d) = input
        .iter()
        .find(|&&d| !(1..=MAX_INPUT_EXTENT).contains(&d))
    {
        return Err(wrong(
            "input",
            format!("extent {d} is outside 1..={MAX_INPUT_EXTENT}"),
        ));
    }
    let overflow = || wrong("width", "the layout's parameter count overflows");
    let counted = match net {
        "mlp" => {
            let features = input
                .iter()
                .try_fold(1usize, |p, &d| p.checked_mul(d))
                .ok_or_else(|| wrong("input", "its element count overflows"))?;
            let hidden = width.checked_mul(8).ok_or_else(overflow)?;
            layers(&[(features, hidden, 1), (hidden, classes, 1)])
        }
        "lenet" => {
            let &[channels, side, other] = input else {
                return Err(wrong("input", "lenet takes channels x side x side"));
            };
            if side != other || side < 16 {
                return Err(wrong(
                    "input",
                    format!("lenet takes a square side of at least 16, not {side} x {other}"),
                ));
            }
            let after = ((side - 4) / 2 - 4) / 2;
            let flat = after
                .checked_mul(after)
                .and_then(|a| a.checked_mul(16))
                .ok_or_else(|| wrong("input", "its element count overflows"))?;
            layers(&[
                (channels, 6, 25),
                (6, 16, 25),
                (flat, 120, 1),
                (120, 84, 1),
                (84, classes, 1),
            ])
        }
        "resnet18" => {
            let mut sizes = vec![(3, width, 9)];
            let mut c_in = width;
            for (g, mult) in [1usize, 2, 4, 8].into_iter().enumerate() {
                let c_out = width.checked_mul(mult).ok_or_else(overflow)?;
                for b in 0..2 {
                    let stride = if g > 0 && b == 0 { 2 } else { 1 };
                    sizes.push((c_in, c_out, 9));
                    sizes.push((c_out, c_out, 9));
                    if stride != 1 || c_in != c_out {
                        sizes.push((c_in, c_out, 1));
                    }
                    c_in = c_out;
                }
            }
            sizes.push((c_in, classes, 1));
            layers(&sizes)
        }
        "vgg11" => {
            let mut sizes = Vec::new();
            let mut c_in = 3;
            for mult in [1usize, 2, 4, 4, 8, 8, 8, 8] {
                let c_out = width.checked_mul(mult).ok_or_else(overflow)?;
                sizes.push((c_in, c_out, 9));
                c_in = c_out;
            }
            sizes.push((c_in, c_in, 1));
            sizes.push((c_in, classes, 1));
            layers(&sizes)
        }
        other => {
            let shown: String = other.chars().take(64).collect();
            return Err(wrong(
                "net",
                format!("unknown model {shown:?} (known: mlp, lenet, resnet18, vgg11)"),
            ));
        }
    };
    counted.ok_or_else(overflow)
}

/// Checks `model`'s declared architecture against the tensors it stores: the count of
/// tensors and the total of parameters must be those of [`declared_parameters`].
pub fn check_architecture(model: &NetworkModel) -> Result<(), P3Error> {
    let stored: usize = model.tensors.iter().map(Vec::len).sum();
    check_counts(
        &model.net,
        &model.input,
        model.width,
        model.classes,
        model.tensors.len(),
        stored,
    )
}

/// Checks a declared architecture against the count of tensors and the total of
/// parameters a file stores (a file's header gives both before any value is read).
pub fn check_counts(
    net: &str,
    input: &[usize],
    width: usize,
    classes: usize,
    stored_tensors: usize,
    stored: usize,
) -> Result<(), P3Error> {
    let (tensors, total) = declared_parameters(net, input, width, classes)?;
    if tensors != stored_tensors || total != stored {
        return Err(wrong(
            "tensors",
            format!(
                "{stored_tensors} tensors of {stored} parameters, but a {net} of input {input:?}, width {width} and {classes} classes has {tensors} tensors of {total}"
            ),
        ));
    }
    Ok(())
}

/// [`check_architecture`] as an error about the model file `path`.
pub fn check_model_file(model: &NetworkModel, path: &Path) -> Result<(), MlError> {
    check_architecture(model).map_err(|e| MlError::InconsistentModel {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(net: &str, input: &[usize], width: usize, classes: usize) -> NetworkModel {
        NetworkModel {
            net: net.into(),
            input: input.to_vec(),
            width,
            classes,
            tensors: vec![vec![0.0; 3]; 2],
        }
    }

    #[test]
    fn huge_or_zero_fields_are_refused_naming_the_field() {
        for (m, field) in [
            (model("mlp", &[3, 32, 32], 1 << 40, 10), "width"),
            (model("resnet18", &[3, 32, 32], 0, 10), "width"),
            (model("mlp", &[1 << 20, 1 << 20], 4, 10), "input"),
            (model("mlp", &[], 4, 10), "input"),
            (model("mlp", &[4], 4, 0), "classes"),
            (model("lenet", &[3, 8, 8], 4, 10), "input"),
            (model("nope", &[4], 4, 10), "net"),
            (model("mlp", &[4], 4, 2), "tensors"),
        ] {
            let err = check_architecture(&m).unwrap_err();
            assert!(
                matches!(&err, P3Error::Architecture { field: f, .. } if *f == field),
                "{err}"
            );
        }
    }

    #[test]
    fn an_mlp_that_matches_its_tensors_is_accepted() {
        // 4 features -> 8 hidden -> 2 classes.
        let m = NetworkModel {
            tensors: vec![vec![0.0; 32], vec![0.0; 8], vec![0.0; 16], vec![0.0; 2]],
            ..model("mlp", &[4], 1, 2)
        };
        check_architecture(&m).unwrap();
        let err = check_model_file(&m, Path::new("m.json"));
        assert!(err.is_ok());
        let bad = NetworkModel {
            width: 3,
            ..m.clone()
        };
        let err = check_model_file(&bad, Path::new("m.json")).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("model file m.json: field `tensors`")
        );
    }

    /// The arithmetic counts what the candle networks make.
    #[cfg(feature = "candle")]
    #[test]
    fn counts_match_the_built_networks() {
        for (net, input, width, classes) in [
            ("mlp", vec![3usize, 8, 8], 2usize, 10usize),
            ("lenet", vec![1, 28, 28], 1, 10),
            ("lenet", vec![3, 32, 32], 1, 7),
            ("resnet18", vec![3, 32, 32], 2, 10),
            ("vgg11", vec![3, 32, 32], 2, 10),
        ] {
            let built = crate::models::nets::by_name(net, &input, width, classes).unwrap();
            let specs: Vec<_> = built.specs().unwrap().into_iter().flatten().collect();
            let total: usize = specs.iter().map(|s| s.len()).sum();
            assert_eq!(
                declared_parameters(net, &input, width, classes).unwrap(),
                (specs.len(), total),
                "{net}"
            );
        }
    }
}
